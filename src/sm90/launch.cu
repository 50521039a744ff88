// Host side of the kernels: tensor maps, tile-shape choice, workspace layout and the launches of the
// m-grouped GEMMs (every epilogue) and of the k-grouped weight gradient.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "sm90/clamp_crossing.hpp"
#include "sm90/device.hpp"
#include "sm90/expert_maps.cuh"
#include "sm90/heuristic.hpp"
#include "sm90/launch.hpp"
#include "sm90/reductions.cuh"
#include "sm90/tail.cuh"

namespace moegemm::sm90 {
namespace {

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(ErrorCode::cuda_error, std::string(what) + ": " + cudaGetErrorString(err));
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (status != cudaDriverEntryPointSuccess || !ptr) {
      throw Error(ErrorCode::cuda_error, "cuTensorMapEncodeTiled is not available from the CUDA driver");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

/// Row pitch in bytes of a tensor map over a row-major matrix of `rows` rows of `cols` elements of `esize`
/// bytes with row stride `stride` (elements): the stride, except for a matrix of at most one row, whose
/// stride the contract leaves free since no second row is addressed (any value, not a multiple of 16 bytes
/// or past what a map encodes): its row width, a multiple of 16 bytes (row_bytes in the contract).
cuuint64_t map_pitch(int64_t rows, int64_t stride, int64_t cols, int esize) {
  return static_cast<cuuint64_t>((rows > 1 ? stride : cols) * esize);
}

/// A tensor map with 128B swizzle; dims[0] is the contiguous one, strides in bytes for dims 1..rank-1.
CUtensorMap make_map(const void* base, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                     const cuuint32_t* box, const char* operand,
                     CUtensorMapDataType type = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16) {
  CUtensorMap map;
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(&map, type, rank, const_cast<void*>(base), dims,
                                    strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw Error(ErrorCode::cuda_error, std::string("cuTensorMapEncodeTiled failed for ") + operand +
                                           " (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  }
  return map;
}

/// MOEGEMM_BLOCK_N=128 or 256 replaces the tile width choose_tile() picks (for measuring the heuristic;
/// dGLU without a saved tile always runs 128); 0 when unset or anything else.
int block_n_override() {
  static const int value = [] {
    const char* env = std::getenv("MOEGEMM_BLOCK_N");
    const std::string v = env ? env : "";
    return v == "128" ? 128 : v == "256" ? 256 : 0;
  }();
  return value;
}

/// The schedule environment variable `variable` names (pingpong or cooperative); nullopt when unset or
/// anything else.
std::optional<Schedule> parse_schedule(const char* variable) {
  const char* env = std::getenv(variable);
  const std::string v = env ? env : "";
  if (v == "pingpong") return Schedule::pingpong;
  if (v == "cooperative") return Schedule::cooperative;
  return std::nullopt;
}

/// An environment variable that a benchmark or test may switch between launches in one process: where it is
/// set at the first launch that asks for it (to anything), it is read again at every launch (bench/pairs.py,
/// bench/wgrad_tiles.py, BackwardGpu.DgluKernelsAgreeBitwise); where it is not, a launch pays a static load
/// instead of a getenv (~25 ns).
struct SwitchableEnv {
  const char* name;
  bool watched;
  explicit SwitchableEnv(const char* variable) : name(variable), watched(std::getenv(variable) != nullptr) {}
  /// The value now; empty where unset or not watched.
  std::string value() const {
    const char* env = watched ? std::getenv(name) : nullptr;
    return env ? env : "";
  }
};

/// MOEGEMM_GLU_SCHEDULE, MOEGEMM_DGLU_SCHEDULE, MOEGEMM_LINEAR_SCHEDULE and MOEGEMM_WGRAD_SCHEDULE replace the
/// launcher's choice of kernel for the GLU, the dGLU with a saved tile, the linear epilogue and the weight
/// gradient (for measuring and testing both kernels of each); read once, the dGLU's and the weight
/// gradient's at every launch (SwitchableEnv).
std::optional<Schedule> glu_schedule_override() {
  static const std::optional<Schedule> value = parse_schedule("MOEGEMM_GLU_SCHEDULE");
  return value;
}
std::optional<Schedule> dglu_schedule_override() {
  static const SwitchableEnv env("MOEGEMM_DGLU_SCHEDULE");
  if (!env.watched) return std::nullopt;
  return parse_schedule(env.name);
}
std::optional<Schedule> linear_schedule_override() {
  static const std::optional<Schedule> value = parse_schedule("MOEGEMM_LINEAR_SCHEDULE");
  return value;
}

/// MOEGEMM_WGRAD_SCHEDULE (switchable): the weight gradient's kernel.
std::optional<Schedule> wgrad_schedule_override() {
  static const SwitchableEnv env("MOEGEMM_WGRAD_SCHEDULE");
  if (!env.watched) return std::nullopt;
  return parse_schedule(env.name);
}

/// MOEGEMM_TILE_ORDER=static or dynamic replaces the launcher's choice of tile order for the launches on the
/// cooperative kernel (tile_order.cuh; for measuring and testing both); nullopt when unset or anything
/// else. Read once.
std::optional<bool> dynamic_order_override() {
  static const std::optional<bool> value = []() -> std::optional<bool> {
    const char* env = std::getenv("MOEGEMM_TILE_ORDER");
    const std::string v = env ? env : "";
    if (v == "dynamic") return true;
    if (v == "static") return false;
    return std::nullopt;
  }();
  return value;
}

/// MOEGEMM_PAIRS=1 (switchable) runs the linear epilogue's cooperative launches in cluster pairs that multicast
/// B (launch_linear_pairs).
bool pairs_override() {
  static const SwitchableEnv env("MOEGEMM_PAIRS");
  return env.value() == "1";
}

/// MOEGEMM_MAX_CTAS=N (a decimal 0 < N < 2^31) caps the persistent grid at N CTAs, so that tests run many
/// tiles per CTA on small problems; 0 (no cap) when unset or anything else (std::from_chars: atoi's overflow
/// is undefined).
int max_ctas_override() {
  static const int value = [] {
    const char* env = std::getenv("MOEGEMM_MAX_CTAS");
    if (!env) return 0;
    const std::string_view text(env);
    int v = 0;
    const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
    return err == std::errc{} && end == text.data() + text.size() && v > 0 ? v : 0;
  }();
  return value;
}

/// A launch's kernel: the override where it is set, else ping-pong where `pays` and MOEGEMM_BLOCK_N is unset
/// (that override keeps the cooperative kernel).
Schedule schedule_choice(std::optional<Schedule> forced, bool pays) {
  if (forced) return *forced;
  return !block_n_override() && pays ? Schedule::pingpong : Schedule::cooperative;
}

/// An m-grouped launch's kernel: for the dGLU, ping-pong where dglu_pingpong_pays (heuristic.hpp) or the
/// override says so, which needs a saved tile; for the linear epilogue and the GLU, where
/// linear_pingpong_pays / glu_pingpong_pays or their override says so; cooperative for every other launch.
Schedule m_grouped_schedule(const ForwardProblem& f, bool saved_tile, int sms) {
  switch (f.epilogue) {
    case EpilogueKind::linear:
      return schedule_choice(linear_schedule_override(), linear_pingpong_pays(f.m, f.n, f.num_experts, sms));
    case EpilogueKind::glu:
      return schedule_choice(glu_schedule_override(), glu_pingpong_pays(f.m, f.n, f.num_experts, sms));
    case EpilogueKind::dglu:
      if (!saved_tile) return Schedule::cooperative;
      return schedule_choice(dglu_schedule_override(), dglu_pingpong_pays(f.m, f.n, f.k, f.num_experts, sms));
    default: return Schedule::cooperative;
  }
}

/// The persistent grid: one CTA per SM at most, never more CTAs than `ctas_with_work`.
int persistent_grid(int sms, int64_t ctas_with_work) {
  const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(sms, ctas_with_work));
  const int cap = max_ctas_override();
  return static_cast<int>(cap ? std::min<int64_t>(grid, cap) : grid);
}

/// SM count of the current device (`current_device`, which also makes its primary context current). The
/// op's device check has run before any launch; a device that fails it here is an internal error.
int sm_count() {
  const DeviceFacts& device = current_device();
  if (!device.mismatch.empty()) throw Error(ErrorCode::cuda_error, "sm_90a launch on " + device.mismatch);
  return device.sms;
}

OutType out_type(DType t) {
  switch (t) {
    case DType::bf16: return OutType::bf16;
    case DType::f16: return OutType::f16;
    default: return OutType::f32;
  }
}

OutMatrix out_matrix(const TensorView& v) {
  OutMatrix o;
  if (!v.defined()) return o;
  o.ptr = v.data;
  o.ld = v.stride(0);
  o.type = out_type(v.dtype);
  return o;
}

/// Store map of a row-major (M, cols) output: boxes of 128 bytes of columns by 64 rows.
CUtensorMap output_map(const OutMatrix& out, int64_t m, int64_t cols, const char* operand) {
  const int esize = out.type == OutType::f32 ? 4 : 2;
  const CUtensorMapDataType type = out.type == OutType::f32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                   : out.type == OutType::f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                                              : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(m)};
  const cuuint64_t strides[1] = {map_pitch(m, out.ld, cols, esize)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / esize), 64};
  return make_map(out.ptr, 2, dims, strides, box, operand, type);
}

/// Bytes of a workspace region rounded up, with slack to align its start to 256 bytes.
std::size_t region(std::size_t bytes) { return bytes ? bytes + 256 : 0; }

/// Carves consecutive 256-byte aligned regions out of the workspace, in the order of workspace_bytes().
struct Carver {
  uint8_t* next;
  void* take(std::size_t bytes) {
    if (!bytes) return nullptr;
    auto* p = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(next) + 255) & ~uintptr_t(255));
    next = p + bytes;
    return p;
  }
};

/// Largest number of n-tiles the chosen tile shape can give (BN >= 128).
int64_t max_n_tiles(const ForwardProblem& f) { return (f.n + 127) / 128; }
std::size_t dprob_partial_bytes(const ForwardProblem& f) {
  return f.dprob.defined() && max_n_tiles(f) > 1 ? static_cast<std::size_t>(max_n_tiles(f) * f.m) * 4 : 0;
}
std::size_t dbias_partial_bytes(const ForwardProblem& f) {
  if (!f.dbias.defined()) return 0;
  const int64_t m_tiles = (f.m + 127) / 128 + f.num_experts;  // each expert adds at most one partial tile
  return static_cast<std::size_t>(m_tiles * 2 * f.dbias.size(1)) * 4;
}

void launch_m_grouped(EpilogueKind kind, const KernelParams& p, int block_n, Schedule schedule, BLayout layout,
                      int grid, cudaStream_t stream) {
  switch (kind) {
    case EpilogueKind::linear:
      if (schedule == Schedule::pingpong) return launch_linear_pingpong(p, layout, grid, stream);
      return launch_linear(p, block_n, layout, grid, stream);
    case EpilogueKind::glu: return launch_glu(p, block_n, schedule, layout, grid, stream);
    case EpilogueKind::srelu: return launch_srelu(p, block_n, layout, grid, stream);
    case EpilogueKind::dglu: return launch_dglu(p, block_n, schedule, layout, grid, stream);
    case EpilogueKind::dsrelu: return launch_dsrelu(p, block_n, layout, grid, stream);
  }
}

/// Whether an m-grouped launch may take its tiles in the dynamic order (tile_order.cuh), which needs a counter
/// in the workspace: where dynamic_order_pays (heuristic.hpp) or the override says so. From the shapes only,
/// since it sizes the workspace; the launch then takes the dynamic order if it runs the cooperative kernel.
bool dynamic_order_possible(const ForwardProblem& f) {
  if (f.m == 0) return false;
  return dynamic_order_override().value_or(dynamic_order_pays(f.m, f.n, f.num_experts));
}

/// The dynamic order's tile counter: one int, zeroed on the stream before the launch.
std::size_t tile_counter_bytes(const ForwardProblem& f) { return dynamic_order_possible(f) ? 4 : 0; }

}  // namespace

std::size_t workspace_bytes(const ForwardProblem& f) {
  return (f.pointer_weights ? expert_maps_bytes(f.num_experts) : 0) + region(dprob_partial_bytes(f)) +
         region(dbias_partial_bytes(f)) + region(tile_counter_bytes(f));
}

void launch_forward(const ForwardProblem& f, cudaStream_t stream) {
  // Before anything is written: an op that cannot run leaves every output as it was.
  if (f.a.dtype != DType::bf16) {
    throw Error(ErrorCode::unsupported, std::string(f.op) + ": a: the sm_90a kernels take bf16 inputs, got " +
                                            dtype_name(f.a.dtype));
  }
  // The op's own starting value of its max (0 over no element), set once nothing left can throw before the
  // launches.
  const auto zero_amax = [&] {
    if (!f.amax.defined()) return;
    check_cuda(cudaMemsetAsync(f.amax.data, 0, static_cast<std::size_t>(f.amax.numel()) * 4, stream),
               "cudaMemsetAsync(amax)");
  };
  const bool glu = f.epilogue == EpilogueKind::glu;
  Carver carve{static_cast<uint8_t*>(f.workspace) + (f.pointer_weights ? expert_maps_bytes(f.num_experts) : 0)};
  float* dprob_partials = static_cast<float*>(carve.take(dprob_partial_bytes(f)));
  float* dbias_partials = static_cast<float*>(carve.take(dbias_partial_bytes(f)));
  int* tile_counter = static_cast<int*>(carve.take(tile_counter_bytes(f)));
  if (f.m == 0) {  // no rows: nothing is addressed and there is no tail, but every expert's dbias is 0
    zero_amax();
    if (f.dbias.defined()) {
      launch_dbias_finish(nullptr, static_cast<int>(f.dbias.size(1)), out_matrix(f.dbias), f.offsets,
                          static_cast<int>(f.num_experts), 0, stream);
    }
    return;
  }
  KernelParams p{};
  p.offsets = f.offsets;
  p.num_experts = static_cast<int>(f.num_experts);
  p.m = static_cast<int>(f.m);
  p.n = static_cast<int>(f.n);
  p.k = static_cast<int>(f.k);
  p.k_blocks = static_cast<int>((f.k + 63) / 64);
  p.alpha = f.alpha;
  p.alpha_scalar = f.alpha_scalar;
  p.prob = f.prob;
  p.bias = f.bias;
  p.bias_f32 = f.bias_f32;
  p.d = out_matrix(f.d);
  p.c = out_matrix(f.c);
  p.preact = out_matrix(f.preact);
  p.beta = f.beta;
  p.act = static_cast<ActKind>(f.glu.activation);
  p.pairing = static_cast<PairKind>(f.glu.layout);
  p.limit = f.glu.limit;
  p.act_alpha = f.glu.act_alpha;
  p.linear_offset = f.glu.linear_offset;
  const ClampCrossing crossing = glu && f.glu.activation == Activation::swiglu_clamped && p.c.ptr &&
                                         p.c.type != OutType::f32
                                     ? clamp_crossing(f.glu.limit, p.c.type == OutType::bf16)
                                     : ClampCrossing{};
  p.crossing_lo = crossing.lo;
  p.crossing_hi = crossing.hi;
  p.crossing_to = crossing.to;
  p.red.amax = f.amax.defined() ? static_cast<float*>(f.amax.data) : nullptr;
  p.red.dbias_partials = dbias_partials;

  const int sms = sm_count();
  // dGLU with 16-bit preact and dC: the producer loads each tile's preact columns by TMA (16-byte aligned
  // rows), and the epilogue writes dC over them in shared memory; otherwise it reads preact from global.
  p.saved_tile = f.epilogue == EpilogueKind::dglu && p.preact.type != OutType::f32 && p.d.type != OutType::f32 &&
                 p.preact.ld % 8 == 0 && reinterpret_cast<uintptr_t>(p.preact.ptr) % 16 == 0;
  // 128 columns per tile on the ping-pong kernel and for a dGLU without a saved tile; else the width the
  // heuristic picks (a 256-column dGLU tile takes two 128-column passes through the staging area).
  if (f.a_column_major && f.epilogue != EpilogueKind::linear) {  // the contract admits it for grouped_gemm only
    throw Error(ErrorCode::internal, std::string(f.op) + ": a: a column-major A reached a kernel without M-major "
                                                         "A tiles");
  }
  // A column-major A runs on the cooperative kernel only (the ping-pong and pair kernels read A K-major).
  const Schedule schedule = f.a_column_major ? Schedule::cooperative : m_grouped_schedule(f, p.saved_tile, sms);
  const bool fixed_128 = schedule == Schedule::pingpong || (f.epilogue == EpilogueKind::dglu && !p.saved_tile);
  const int block_n = fixed_128            ? 128
                      : block_n_override() ? block_n_override()
                                           : choose_tile(f.m, f.n, f.num_experts, sms).block_n;
  // Half tiles split columns between the warpgroups; a 128-wide halves GLU tile has only one gate box. The
  // backward epilogues take none whatever this says (their kHalfTiles is false).
  p.half_tiles = !(glu && f.glu.layout == GluLayout::halves && block_n == 128);
  if (glu && f.glu.layout == GluLayout::halves) {
    p.n_tiles = static_cast<int>((f.n / 2 + block_n / 2 - 1) / (block_n / 2));
  } else {
    p.n_tiles = static_cast<int>((f.n + block_n - 1) / block_n);
  }
  // Row sums come in one slot per n-tile, or per 128 dH columns for dGLU (one per epilogue pass).
  const int row_sum_slots = f.epilogue == EpilogueKind::dglu ? static_cast<int>((f.n + 127) / 128) : p.n_tiles;
  if (f.dprob.defined()) {
    if (row_sum_slots == 1) p.red.dprob = static_cast<float*>(f.dprob.data);
    else p.red.dprob_partials = dprob_partials;
  }

  if (f.a_column_major) {
    // M contiguous: a 3-D map {M, K, 1}, each stage's 128 rows loaded as two 64 x 64 boxes (M-major tiles,
    // as the weight gradient's X). Rows past M and columns past K zero-fill. A box must start at a 16-byte
    // multiple along M (an unaligned start faults), so each expert's first tile starts at its first row
    // rounded down to a multiple of 8, and the epilogue writes none of the rows before it.
    p.tile_row_align = 8;
    const cuuint64_t a_dims[3] = {static_cast<cuuint64_t>(f.m), static_cast<cuuint64_t>(f.k), 1};
    const cuuint64_t pitch = static_cast<cuuint64_t>(f.a.stride(1)) * 2;
    const cuuint64_t a_strides[2] = {pitch, pitch * static_cast<cuuint64_t>(f.k)};
    const cuuint32_t a_box[3] = {64, 64, 1};
    p.tma_a = make_map(f.a.data, 3, a_dims, a_strides, a_box, "a");
  } else {
    const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(f.k), static_cast<cuuint64_t>(f.m)};
    const cuuint64_t a_strides[1] = {map_pitch(f.m, f.a.stride(0), f.k, 2)};
    const cuuint32_t a_box[2] = {64, 128};
    p.tma_a = make_map(f.a.data, 2, a_dims, a_strides, a_box, "a");
  }

  // B as a 3-D map (inner, outer, expert) so that N and K tails zero-fill inside each expert. Dense weights
  // are read at their own row and expert strides (padded rows, strided stacks); pointer-mode weights get one
  // map per packed expert matrix (expert extent 1), made on the device from a template.
  const cuuint64_t e = f.b_ptrs ? 1 : static_cast<cuuint64_t>(f.num_experts);
  const void* b_base = f.b_ptrs ? f.workspace : f.b;  // the template's address is replaced per expert
  const cuuint32_t b_box[3] = {64, 64, 1};
  const int64_t b_cols = f.b_layout == BLayout::nk ? f.k : f.n, b_rows = f.b_layout == BLayout::nk ? f.n : f.k;
  const cuuint64_t b_pitch = map_pitch(b_rows, f.b_ptrs ? b_cols : f.b_row_stride, b_cols, 2);
  // A stride the map never steps (one expert) stays free in the contract: the packed one stands in for it.
  const cuuint64_t expert_pitch = e > 1 ? static_cast<cuuint64_t>(f.b_expert_stride) * 2 : b_rows * b_pitch;
  const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(b_cols), static_cast<cuuint64_t>(b_rows), e};
  const cuuint64_t b_strides[2] = {b_pitch, expert_pitch};
  p.tma_b = make_map(b_base, 3, b_dims, b_strides, b_box, "b");
  if (f.b_ptrs) p.b_maps = launch_expert_maps(p.tma_b, f.b_ptrs, p.num_experts, f.workspace, stream);

  const int64_t d_cols = f.d.size(1);
  p.tma_d = output_map(p.d, f.m, d_cols, "d");
  if (p.c.ptr) p.tma_c = output_map(p.c, f.m, f.n, "c");
  if (p.saved_tile) p.tma_c = output_map(p.preact, f.m, f.preact.size(1), "preact");

  zero_amax();

  // Persistent grid: at most one CTA per SM, never more CTAs than the largest possible tile count (ping-pong:
  // than half of it, since each CTA runs two tiles at a time).
  const int64_t max_tiles = ((f.m + 127) / 128 + std::min<int64_t>(f.num_experts, f.m)) * p.n_tiles;
  const int grid = persistent_grid(sms, schedule == Schedule::pingpong ? (max_tiles + 1) / 2 : max_tiles);
  if (f.epilogue == EpilogueKind::linear && schedule == Schedule::cooperative && pairs_override() &&
      !f.a_column_major) {
    p.half_tiles = false;
    launch_linear_pairs(p, block_n, f.b_layout, grid, stream);
  } else {
    if (tile_counter && schedule == Schedule::cooperative) {
      check_cuda(cudaMemsetAsync(tile_counter, 0, 4, stream), "cudaMemsetAsync(tile counter)");
      p.tile_counter = tile_counter;
    }
    if (f.a_column_major) launch_linear_m_major_a(p, block_n, f.b_layout, grid, stream);
    else launch_m_grouped(f.epilogue, p, block_n, schedule, f.b_layout, grid, stream);
  }

  if (p.red.dprob_partials) {
    launch_dprob_finish(p.red.dprob_partials, row_sum_slots, static_cast<float*>(f.dprob.data), f.offsets,
                        p.num_experts, p.m, stream);
  }
  if (f.dbias.defined()) {
    launch_dbias_finish(dbias_partials, static_cast<int>(f.dbias.size(1)), out_matrix(f.dbias), f.offsets,
                        p.num_experts, p.m, stream);
  }
  if (f.zero_tail) {
    launch_zero_tail(p.d, d_cols, f.offsets, p.num_experts, p.m, sms, stream);
    launch_zero_tail(p.c, f.n, f.offsets, p.num_experts, p.m, sms, stream);
    if (f.dprob.defined()) {
      launch_zero_tail(OutMatrix{f.dprob.data, 1, OutType::f32}, 1, f.offsets, p.num_experts, p.m, sms,
                       stream);
    }
  }
}

/// The per-expert maps of A and B, the dynamic order's tile counter, whichever order the launch takes, and the
/// copy of a w_ptrs table, whichever output mode the launch writes (the size depends on E alone).
std::size_t wgrad_workspace_bytes(int64_t num_experts) {
  return 2 * expert_maps_bytes(num_experts) + region(4) + region(8 * static_cast<std::size_t>(num_experts));
}

void launch_wgrad(const WgradProblem& w, cudaStream_t stream) {
  const int64_t t = w.a.size(0), m = w.a.size(1), n = w.b.size(1);
  if (w.a.dtype != DType::bf16) {
    throw Error(ErrorCode::unsupported, std::string("grouped_gemm_wgrad: x: the sm_90a kernels take bf16 inputs, got ") +
                                            dtype_name(w.a.dtype));
  }
  KernelParams p{};
  p.offsets = w.offsets;
  p.num_experts = static_cast<int>(w.num_experts);
  p.m = static_cast<int>(m);
  p.n = static_cast<int>(n);
  p.k = static_cast<int>(t);
  p.alpha_scalar = 1.f;
  p.accumulate = w.accumulate;
  p.w_ptrs = w.w_ptrs;
  p.d.type = out_type(w.w_ptrs ? w.w_dtype : w.w.dtype);
  p.d.ld = n;
  const int sms = sm_count();
  // The ping-pong kernel (one warpgroup's epilogue under the other's mainloop, 128 x 128 tiles) where
  // wgrad_pingpong_pays (heuristic.hpp) or the override says so.
  const int out_bytes = p.d.type == OutType::f32 ? 4 : 2;
  const Schedule schedule =
      schedule_choice(wgrad_schedule_override(), wgrad_pingpong_pays(t, w.num_experts, out_bytes, m, n, sms));
  // On the cooperative kernel, f32 weights of short experts (<= 384 rows on average): 128 x 128 tiles whose
  // f32 slice is staged in one pass, since with few k-blocks per tile the output writes bound the op and the
  // 128 x 256 tile's two passes leave them unoverlapped (H200, f32 wgrad of deepseek-v3's 256-row experts:
  // 6-11% faster; of qwen3-30b-a3b's 512-row experts: 7% slower). Else the tile-count heuristic, over E
  // experts x ceil(m / 128) row tiles as if the experts' outputs were stacked.
  const bool short_f32 = p.d.type == OutType::f32 && t <= 384 * w.num_experts;
  const int block_n = schedule == Schedule::pingpong ? 128
                      : block_n_override()           ? block_n_override()
                      : short_f32                    ? 128
                                                     : choose_tile(w.num_experts * ((m + 127) / 128) * 128, n, 1, sms).block_n;
  p.n_tiles = static_cast<int>((n + block_n - 1) / block_n);

  // Templates of the per-expert maps: A (T, m) and B (T, n) as {cols, rows, 1}; the device replaces the
  // base address with the expert's first row and the row extent with its row count.
  const cuuint32_t box[3] = {64, 64, 1};
  const cuuint64_t rows = static_cast<cuuint64_t>(std::max<int64_t>(t, 1));
  const cuuint64_t a_dims[3] = {static_cast<cuuint64_t>(m), rows, 1};
  const cuuint64_t a_pitch = map_pitch(t, w.a.stride(0), m, 2), b_pitch = map_pitch(t, w.b.stride(0), n, 2);
  const cuuint64_t a_strides[2] = {a_pitch, a_pitch * rows};
  // Without rows (T = 0) nothing is loaded through the maps, and x and dy may have no storage at all (torch's
  // empty CUDA tensors have a null address, which the driver's encoder is not documented to take): the
  // workspace stands in for them.
  const void* x_base = t > 0 ? w.a.data : w.workspace;
  const void* dy_base = t > 0 ? w.b.data : w.workspace;
  p.tma_a = make_map(x_base, 3, a_dims, a_strides, box, "x");
  const cuuint64_t b_dims[3] = {static_cast<cuuint64_t>(n), rows, 1};
  const cuuint64_t b_strides[2] = {b_pitch, b_pitch * rows};
  p.tma_b = make_map(dy_base, 3, b_dims, b_strides, box, "dy");
  // The dynamic tile order (wgrad_dynamic_order_pays, or the override) on the cooperative kernel: its counter
  // follows the maps in the workspace, and the maps' kernel zeroes it.
  const int64_t tiles = w.num_experts * ((m + 127) / 128) * p.n_tiles;
  Carver carver{static_cast<uint8_t*>(w.workspace) + 2 * expert_maps_bytes(w.num_experts)};
  int* const counter = static_cast<int*>(carver.take(4));
  if (schedule == Schedule::cooperative &&
      dynamic_order_override().value_or(wgrad_dynamic_order_pays(tiles, w.num_experts))) {
    p.tile_counter = counter;
  }
  // The kernels write through the maps kernel's copy of w_ptrs, never the caller's table (docs/ops.md rule 9).
  int64_t* const w_ptrs_copy = static_cast<int64_t*>(carver.take(8 * static_cast<std::size_t>(w.num_experts)));
  if (w.w_ptrs) p.w_ptrs = w_ptrs_copy;
  const RaggedKMaps maps =
      launch_ragged_k_maps(p.tma_a, p.tma_b, x_base, static_cast<int64_t>(a_pitch), dy_base,
                           static_cast<int64_t>(b_pitch), w.offsets, p.num_experts, p.k, w.workspace,
                           p.tile_counter, w.w_ptrs, w_ptrs_copy, stream);
  p.a_maps = maps.a;
  p.b_maps = maps.b;
  if (!w.w_ptrs) {
    p.d.ptr = w.w.data;
    if (dense_rows_fit_tma(p)) p.tma_d = output_map(p.d, w.num_experts * m, n, "w");
  }
  if (schedule == Schedule::pingpong) launch_wgrad_pingpong(p, persistent_grid(sms, (tiles + 1) / 2), stream);
  else launch_wgrad_kernel(p, block_n, persistent_grid(sms, tiles), stream);
}

}  // namespace moegemm::sm90
