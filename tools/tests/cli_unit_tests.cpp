// Unit tests of the moegemm program's parts. The end-to-end runs are the ctest cases in cli_tests.cmake.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include <cuda_bf16.h>
#include <unistd.h>

#include "compare.hpp"
#include "moe_layer.hpp"
#include "options.hpp"
#include "routing.hpp"
#include "sample.hpp"
#include "spot_check.hpp"
#include "tensor_store.hpp"
#include "usage_error.hpp"
#include "verify.hpp"

namespace moegemm::cli {
namespace {

TEST(TensorStore, ByteCountPastSixtyFourBitsIsAnError) {
  // 2^31 x 2^31 x 2 f32 elements are 2^65 bytes: refused, never a wrapped (smaller) allocation.
  const int64_t big = int64_t{1} << 31;
  EXPECT_THROW(make_tensor(Device::host, DType::f32, {big, big, 2}), std::length_error);
  const OwnedTensor t = make_tensor(Device::host, DType::f32, {3, 5});
  EXPECT_NE(t.view.data, nullptr);
  EXPECT_EQ(t.bytes(), 60u);
}

TEST(Compare, IdenticalPassesWithZeroError) {
  const std::vector<double> e{1.0, -2.0, 0.5, 3.0};
  const Comparison c = compare("D", e, e);
  EXPECT_TRUE(c.passed);
  EXPECT_EQ(c.mismatches, 0);
  EXPECT_EQ(c.max_abs_err, 0.0);
  EXPECT_EQ(c.rel_frobenius, 0.0);
}

TEST(Compare, BfloatRoundingPassesOneBadElementFails) {
  std::vector<double> e(1000), a(1000);
  for (int i = 0; i < 1000; ++i) {
    e[i] = std::sin(0.37 * i) * 2.0;
    a[i] = e[i] * (1.0 + ((i % 2) ? 1 : -1) * 0x1p-8);  // half a bf16 ulp, relative
  }
  EXPECT_TRUE(compare("D", a, e).passed);
  a[17] = e[17] + 0.5;
  const Comparison c = compare("D", a, e);
  EXPECT_FALSE(c.passed);
  EXPECT_EQ(c.mismatches, 1);
  EXPECT_NEAR(c.max_abs_err, 0.5, 1e-2);
}

TEST(Compare, NanFailsAndScaledErrorFails) {
  std::vector<double> e{1.0, 2.0, 3.0}, a = e;
  a[1] = std::nan("");
  EXPECT_FALSE(compare("D", a, e).passed);
  const std::vector<double> scaled{1.1, 2.2, 3.3};  // 10 % off everywhere: over the Frobenius bound
  const Comparison c = compare("D", scaled, e);
  EXPECT_FALSE(c.passed);
  EXPECT_NEAR(c.rel_frobenius, 0.1, 1e-9);
}

TEST(Routing, SizesSumToRowsAndDependOnSeed) {
  for (Routing r : {Routing::uniform, Routing::zipf}) {
    const auto a = group_sizes(r, 10000, 64, 1), b = group_sizes(r, 10000, 64, 1), c = group_sizes(r, 10000, 64, 2);
    EXPECT_EQ(a.size(), 64u);
    int64_t total = 0;
    for (int64_t s : a) total += s;
    EXPECT_EQ(total, 10000);
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
  }
}

TEST(Routing, ZipfIsSkewedUniformIsNot) {
  const auto u = group_sizes(Routing::uniform, 80000, 8, 0), z = group_sizes(Routing::zipf, 80000, 8, 0);
  // Uniform: every expert near 10000. Zipf with s = 1.2 over 8 experts: the top one gets 1 / sum_r r^-1.2.
  for (int64_t s : u) EXPECT_NEAR(double(s), 10000.0, 600.0);
  double norm = 0;
  for (int r = 1; r <= 8; ++r) norm += std::pow(double(r), -1.2);
  EXPECT_NEAR(double(*std::max_element(z.begin(), z.end())) / 80000.0, 1.0 / norm, 0.01);
  const std::vector<int32_t> ends = end_offsets({3, 0, 2});
  EXPECT_EQ(ends, (std::vector<int32_t>{3, 3, 5}));
}

TEST(Sample, RowsAreGroupedFirstAndLastIncludedEmptySkipped) {
  const std::vector<int32_t> ends = end_offsets({5, 0, 40, 1, 0, 7, 300, 2});
  const RowSample s = sample_rows(ends, 4, 32, 9);
  ASSERT_EQ(s.experts.size(), 4u);
  EXPECT_TRUE(std::is_sorted(s.experts.begin(), s.experts.end()));
  const std::set<int64_t> experts(s.experts.begin(), s.experts.end());
  EXPECT_TRUE(experts.count(0) && experts.count(7) && experts.count(6));  // first, last, largest
  EXPECT_FALSE(experts.count(1) || experts.count(4));                     // empty
  ASSERT_EQ(s.ends.size(), s.experts.size());
  EXPECT_EQ(s.ends.back(), static_cast<int32_t>(s.rows.size()));
  int32_t begin = 0;
  for (size_t i = 0; i < s.experts.size(); ++i) {
    const int64_t e = s.experts[i], lo = e == 0 ? 0 : ends[e - 1], hi = ends[e];
    std::set<int64_t> rows(s.rows.begin() + begin, s.rows.begin() + s.ends[i]);
    EXPECT_TRUE(rows.count(lo) && rows.count(hi - 1)) << "expert " << e;
    for (int64_t r : rows) EXPECT_TRUE(r >= lo && r < hi);
    begin = s.ends[i];
  }
  EXPECT_TRUE(std::is_sorted(s.rows.begin(), s.rows.end()));
}

TEST(Sample, ColumnsComeInAlignedBlocks) {
  const auto all = sample_columns(24, 64, 0);
  EXPECT_EQ(all.size(), 24u);
  const auto cols = sample_columns(4096, 64, 3);
  EXPECT_EQ(cols.size(), 64u);
  EXPECT_EQ(cols.front(), 0);
  EXPECT_EQ(cols.back(), 4095);
  for (size_t i = 0; i < cols.size(); i += 8) {
    EXPECT_EQ(cols[i] % 8, 0);
    for (size_t j = 1; j < 8; ++j) EXPECT_EQ(cols[i + j], cols[i] + int64_t(j));
  }
  EXPECT_TRUE(std::is_sorted(cols.begin(), cols.end()));
}

TEST(SpotCheck, GroupedGemmBothLayouts) {
  // Two experts, K = 2, N = 2. Rows 0..1 use expert 0, row 2 uses expert 1.
  const std::vector<double> a{1, 2, 3, 4, 5, 6};
  const std::vector<double> b_nk{1, 0, 0, 1, /* expert 1 */ 1, 1, 2, -1};  // (E, N, K)
  const std::vector<double> b_kn{1, 0, 0, 1, /* expert 1 */ 1, 2, 1, -1};  // the same weights as (E, K, N)
  const std::vector<int32_t> ends{2, 3};
  const std::vector<double> want{1, 2, 3, 4, 11, 4};
  EXPECT_EQ(spot::grouped_gemm({a, b_nk, BLayout::nk, ends, 2, 2}), want);
  EXPECT_EQ(spot::grouped_gemm({a, b_kn, BLayout::kn, ends, 2, 2}), want);
}

TEST(SpotCheck, SwigluAndItsDerivative) {
  const std::vector<double> g{1.0, 2.0}, prob{0.5};  // gate 1, up 2
  const double silu1 = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_NEAR(spot::swiglu(g, prob, 1)[0], 0.5 * silu1 * 2.0, 1e-15);
  // dC against central differences of D = prob * silu(gate) * up; dprob = silu(gate) * up * dH.
  std::vector<double> dc, dprob;
  const double dh = 0.75, h = 1e-6;
  spot::dswiglu({dh}, g, prob, 1, dc, dprob);
  auto d = [&](double gate, double up) { return spot::swiglu({gate, up}, prob, 1)[0]; };
  EXPECT_NEAR(dc[0], dh * (d(1 + h, 2) - d(1 - h, 2)) / (2 * h), 1e-8);
  EXPECT_NEAR(dc[1], dh * (d(1, 2 + h) - d(1, 2 - h)) / (2 * h), 1e-8);
  EXPECT_NEAR(dprob[0], silu1 * 2.0 * dh, 1e-15);
}

TEST(SpotCheck, WgradSumsOverEachExpertsRows) {
  // X (3, 1), dY (3, 2); expert 0 = rows 0..1, expert 1 = row 2, expert 2 empty -> zeros.
  const std::vector<double> x{1, 2, 3}, dy{1, 10, 2, 20, 3, 30};
  const auto w = spot::wgrad_transposed(x, dy, {2, 3, 3}, 1, 2);
  EXPECT_EQ(w, (std::vector<double>{5, 50, 9, 90, 0, 0}));
}

// A small layer on the host backend, with one step run.
class LayerVerification : public ::testing::Test {
 protected:
  void SetUp() override {
    shape_ = {"unit", 48, 2, 6, 64, 32};
    layer_ = make_layer(shape_, Routing::zipf, Device::host, 4);
    steps_ = layer_steps(layer_);
  }
  void run(const Step& s) {
    std::vector<char> ws(s.workspace_bytes());
    s.call(ws.data(), ws.size(), nullptr);
  }
  ModelPreset shape_;
  MoeLayer layer_;
  std::vector<Step> steps_;
};

TEST_F(LayerVerification, EveryStepPassesWithBothOracles) {
  for (const Step& s : steps_) {
    run(s);
    for (Oracle o : {Oracle::spot_check, Oracle::reference}) {
      const Verification v = verify_step(layer_, s, o, 1);
      EXPECT_TRUE(v.passed()) << s.label << " " << oracle_name(o);
      EXPECT_GT(v.rows, 0);
      for (const auto& c : v.outputs) EXPECT_GT(c.elements, 0);
    }
  }
}

TEST_F(LayerVerification, WrongOrUnwrittenOutputsFail) {
  const Step& up = steps_[0];
  run(up);
  auto* h = layer_.h.view.ptr<__nv_bfloat16>();
  for (int64_t i = 0; i < layer_.h.view.numel(); ++i) h[i] = __float2bfloat16(1.05f * __bfloat162float(h[i]));
  EXPECT_FALSE(verify_step(layer_, up, Oracle::spot_check, 1).passed()) << "5 % off must fail";
  poison(layer_.pre.view);
  run(steps_[1]);  // down reads h: still fine
  const Verification v = verify_step(layer_, up, Oracle::reference, 1);
  EXPECT_FALSE(v.passed()) << "unwritten (NaN) C must fail";
  const Step& wgrad = steps_[5];
  run(wgrad);
  EXPECT_TRUE(verify_step(layer_, wgrad, Oracle::spot_check, 1).passed());
  layer_.dw2.view.ptr<float>()[0] += 1.0f;  // expert 0, row 0, column 0: always in the sample (first block)
  const std::vector<int32_t>& ends = layer_.ends;
  if (ends[0] > 0) EXPECT_FALSE(verify_step(layer_, wgrad, Oracle::spot_check, 1).passed());
}

// More experts than rows: most experts are empty, and their weight gradient must read exactly 0.
TEST(LayerVerificationEmptyExperts, UnwrittenEmptyExpertGradientFails) {
  MoeLayer layer = make_layer({"sparse", 6, 1, 16, 64, 32}, Routing::zipf, Device::host, 4);
  const std::vector<Step> steps = layer_steps(layer);
  const Step& wgrad = steps[5];
  std::vector<char> ws(wgrad.workspace_bytes());
  wgrad.call(ws.data(), ws.size(), nullptr);
  int64_t first_empty = -1;
  for (size_t e = 0; e < layer.ends.size() && first_empty < 0; ++e)
    if (layer.ends[e] == (e == 0 ? 0 : layer.ends[e - 1])) first_empty = static_cast<int64_t>(e);
  ASSERT_GE(first_empty, 0);
  for (Oracle o : {Oracle::spot_check, Oracle::reference}) {
    const Verification v = verify_step(layer, wgrad, o, 1);
    ASSERT_EQ(v.outputs.size(), 2u);
    EXPECT_EQ(v.outputs[1].output, "W of empty experts");
    EXPECT_GT(v.outputs[1].elements, 0);
    EXPECT_TRUE(v.passed()) << oracle_name(o);
  }
  // The op forgetting an empty expert leaves the poison (NaN) there: expert first_empty, entry (0, 0) is in the
  // sample (the first 8-column blocks of both dims).
  const int64_t slab = layer.dw2.view.shape[1] * layer.dw2.view.shape[2];
  float* dw2 = layer.dw2.view.ptr<float>() + first_empty * slab;
  dw2[0] = std::nanf("");
  Verification v = verify_step(layer, wgrad, Oracle::spot_check, 1);
  EXPECT_FALSE(v.passed());
  EXPECT_TRUE(std::isnan(v.max_abs_err())) << "a NaN error must not read as 0";
  dw2[0] = -1e-30f;  // any nonzero value fails, however small
  EXPECT_FALSE(verify_step(layer, wgrad, Oracle::spot_check, 1).passed());
  dw2[0] = 0.0f;
  EXPECT_TRUE(verify_step(layer, wgrad, Oracle::spot_check, 1).passed());
  // The second expert checked is one of the others: poisoning all of them but the first fails too.
  int poisoned = 0;
  for (size_t e = static_cast<size_t>(first_empty) + 1; e < layer.ends.size(); ++e)
    if (layer.ends[e] == layer.ends[e - 1]) layer.dw2.view.ptr<float>()[e * slab] = std::nanf(""), ++poisoned;
  ASSERT_GT(poisoned, 0);
  EXPECT_FALSE(verify_step(layer, wgrad, Oracle::spot_check, 1).passed());
}

TEST(Compare, NanErrorWinsOverInfInEitherOrder) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  for (const std::vector<double>& a : {std::vector<double>{nan, inf, 1}, std::vector<double>{1, inf, nan}}) {
    EXPECT_TRUE(std::isnan(compare("D", a, {1, 1, 1}).max_abs_err));
    EXPECT_TRUE(std::isnan(compare_zeros("W", a).max_abs_err));
  }
  EXPECT_EQ(compare_zeros("W", {1, inf, 2}).max_abs_err, inf);
}

TEST(Options, JsonPathProbeCreatesNothingAndRemovesOnlyItsOwnFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("moegemm_cli_probe_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string fresh = (dir / "fresh.json").string();
  check_writable_path(fresh);
  EXPECT_FALSE(fs::exists(fresh)) << "the probe's file is removed";
  const std::string kept = (dir / "kept.json").string();
  std::ofstream(kept) << "old";
  check_writable_path(kept);
  std::ifstream in(kept);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "old") << "an existing file is neither truncated nor removed";
  const fs::path link = dir / "link.json", target = dir / "target.json";
  fs::create_symlink(target, link);  // dangling
  check_writable_path(link.string());
  EXPECT_TRUE(fs::is_symlink(link)) << "a dangling link is left in place";
  EXPECT_FALSE(fs::exists(target)) << "and its target is not created";
  EXPECT_THROW(check_writable_path((dir / "missing" / "x.json").string()), UsageError);
  fs::remove_all(dir);
}

TEST(Compare, ZerosCheckCountsEveryNonzeroAndNan) {
  const Comparison c = compare_zeros("W", {0.0, -0.0, 1e-300, std::nan(""), 0.0});
  EXPECT_EQ(c.elements, 5);
  EXPECT_EQ(c.mismatches, 2);
  EXPECT_FALSE(c.passed);
  EXPECT_TRUE(std::isnan(c.max_abs_err));
  EXPECT_TRUE(compare_zeros("W", {0.0, -0.0}).passed);
}

}  // namespace
}  // namespace moegemm::cli
