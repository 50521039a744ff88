#include "report.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>

#include <nlohmann/json.hpp>

#include "moegemm/version.hpp"

namespace moegemm::cli {

bool StepResult::passed() const {
  if (status == StepStatus::no_kernel) return true;
  return status == StepStatus::ok && verification && verification->passed();
}

std::optional<double> StepResult::tflops() const {
  if (!time_us || *time_us <= 0) return std::nullopt;
  return flops / *time_us * 1e-6;
}

std::optional<double> StepResult::dense_tflops() const {
  if (!dense_time_us || *dense_time_us <= 0) return std::nullopt;
  return flops / *dense_time_us * 1e-6;
}

std::optional<double> StepResult::fraction_of_dense() const {
  const auto t = tflops(), d = dense_tflops();
  if (!t || !d) return std::nullopt;
  return *t / *d;
}

bool ModelResult::passed() const {
  return std::all_of(steps.begin(), steps.end(), [](const StepResult& s) { return s.passed(); });
}

bool RunReport::passed() const {
  return std::all_of(models.begin(), models.end(), [](const ModelResult& m) { return m.passed(); });
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

const char* status_name(StepStatus s) {
  switch (s) {
    case StepStatus::ok: return "ok";
    case StepStatus::no_kernel: return "no kernel yet";
    case StepStatus::failed: return "failed";
  }
  return "failed";
}

std::string fmt(std::optional<double> v, const char* spec) {
  if (!v) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, spec, *v);
  return buf;
}

// A JSON number, or null for an absent or non-finite value (JSON has no NaN).
nlohmann::ordered_json number(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

}  // namespace

void print_model_table(const ModelResult& m, bool gpu) {
  const auto& s = m.shape;
  const auto [lo, hi] = std::minmax_element(m.group_sizes.begin(), m.group_sizes.end());
  std::printf("\n%s: tokens=%lld top_k=%lld experts=%lld hidden=%lld intermediate=%lld, rows per expert %lld..%lld\n",
              s.name.c_str(), (long long)s.tokens, (long long)s.top_k, (long long)s.experts, (long long)s.hidden,
              (long long)s.intermediate, (long long)*lo, (long long)*hi);
  std::printf("  %-18s %-19s %-22s %11s %9s %9s %10s  %s\n", "op", "function", "M x N x K", gpu ? "time us" : "cpu us",
              "TFLOP/s", "vs dense", "max |err|", "check");
  for (const auto& r : m.steps) {
    char shape[48];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)r.m, (long long)r.n, (long long)r.k);
    std::string check;
    if (r.status == StepStatus::no_kernel) check = "no kernel yet";
    else if (r.status == StepStatus::failed) check = "FAILED: " + r.error;
    else check = r.verification->passed() ? "ok (" + std::to_string(r.verification->rows) + " rows)" : "WRONG VALUES";
    const std::optional<double> err =
        r.verification ? std::optional<double>(r.verification->max_abs_err()) : std::nullopt;
    std::printf("  %-18s %-19s %-22s %11s %9s %9s %10s  %s\n", r.label.c_str(), r.function.c_str(), shape,
                fmt(r.time_us, "%.1f").c_str(), fmt(r.tflops(), gpu ? "%.1f" : "%.4f").c_str(),
                fmt(r.fraction_of_dense(), "%.2f").c_str(), fmt(err, "%.2e").c_str(), check.c_str());
  }
  std::fflush(stdout);
}

void write_json(const RunReport& r, const std::string& path) {
  using J = nlohmann::ordered_json;
  J models = J::array();
  for (const auto& m : r.models) {
    J ops = J::array();
    for (const auto& s : m.steps) {
      J v = nullptr;
      if (s.verification) {
        J outs = J::array();
        for (const auto& c : s.verification->outputs)
          outs.push_back({{"name", c.output}, {"elements", c.elements}, {"max_abs_err", number(c.max_abs_err)},
                          {"rel_frobenius", number(c.rel_frobenius)}, {"mismatches", c.mismatches},
                          {"passed", c.passed}});
        v = {{"oracle", oracle_name(s.verification->oracle)}, {"rows", s.verification->rows},
             {"experts", s.verification->experts}, {"passed", s.verification->passed()},
             {"max_abs_err", number(s.verification->max_abs_err())}, {"outputs", outs}};
      }
      ops.push_back({{"op", s.label}, {"function", s.function}, {"M", s.m}, {"N", s.n}, {"K", s.k},
                     {"flops", s.flops}, {"status", status_name(s.status)},
                     {"error", s.error.empty() ? J(nullptr) : J(s.error)}, {"time_us", number(s.time_us)},
                     {"tflops", number(s.tflops())}, {"dense_time_us", number(s.dense_time_us)},
                     {"dense_tflops", number(s.dense_tflops())}, {"fraction_of_dense", number(s.fraction_of_dense())},
                     {"verification", v}, {"passed", s.passed()}});
    }
    const auto& p = m.shape;
    models.push_back({{"name", p.name}, {"tokens", p.tokens}, {"top_k", p.top_k}, {"experts", p.experts},
                      {"hidden", p.hidden}, {"intermediate", p.intermediate}, {"rows", p.rows()},
                      {"group_sizes", m.group_sizes}, {"passed", m.passed()}, {"ops", ops}});
  }
  const J doc = {{"schema", "moegemm-run/1"},
                 {"moegemm_version", kVersion},
                 {"backend", r.gpu ? "gpu" : "cpu"},
                 {"device", r.device},
                 {"date", r.date},
                 {"routing", routing_name(r.routing)},
                 {"seed", r.seed},
                 {"reduced", r.reduced},
                 {"timing", {{"warmup", r.warmup}, {"iters", r.iters},
                             {"method", r.gpu ? "median of CUDA-event-timed calls" : "host wall time of one call"}}},
                 {"tolerances", {{"max_rel_frobenius", kMaxRelFrobenius}, {"rtol", kRtol}, {"atol", kAtol}}},
                 {"passed", r.passed()},
                 {"models", models}};
  write_file(path, doc.dump(1) + '\n');
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw Error(ErrorCode::invalid_argument, "cannot write " + path);
}

}  // namespace moegemm::cli
