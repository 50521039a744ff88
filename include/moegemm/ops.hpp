// The moegemm op family: one call per op of docs/ops.md, each with a workspace-size query.
//
// Conventions shared by every op (docs/ops.md §0):
//  - E experts, M rows (tokens x top-k, sorted by expert), K contraction, N output columns.
//  - offsets: (E,) int32, the cumulative *end* row of each expert: expert g owns rows
//    [offsets[g-1], offsets[g]) with offsets[-1] := 0. Any alignment, empty experts allowed.
//    Offsets are never read on the host by the GPU path (no sync, CUDA-graph capturable); the kernels
//    clamp every end into [previous end, M], so garbage offsets cannot cause an out-of-bounds access.
//  - Backend: every tensor of a call lives on the host (CPU reference) or every tensor lives on the
//    device (sm_90a kernels). Mixing raises Error(invalid_argument).
//  - Outputs are written exactly where the contract says. Rows at or past offsets[E-1] are left alone
//    unless zero_tail, which writes zeros to exactly those rows. Nothing else is initialised.
//  - Dtypes by role (docs/ops.md §0.2, rules 2-3): inputs a, b (b.dtype with ptrs), x, dy bf16 or f16, all of
//    one dtype; outputs d, c, dc, ab12, w and the saved pre-activation c bf16, f16 or f32; offsets i32; alpha,
//    beta, prob, dprob, amax f32; bias bf16 or f32; dbias f32 or bf16; b.ptrs, w_ptrs i64. The sm_90a kernels
//    take bf16 inputs (f16 raises Error(unsupported)); the host backend also takes f32 and f64 inputs, and f64
//    outputs and bias. 8-bit (e4m3, e5m2) and FP4 (e2m1) inputs raise Error(unsupported) on both backends.
//  - Sizes: 1 <= E <= kMaxExperts; M >= 0; K, N, H > 0.
//  - Layout (rules 5-6): 2-D operands row-major, stride(1) == 1 and stride(0) >= the columns (grouped_gemm's a
//    may also be column-major); vectors contiguous. Base addresses 16-byte aligned, row lengths and row strides
//    multiples of 16 bytes: K, N and H multiples of 8 for 16-bit dtypes.
//  - Units: shapes in elements, strides in elements, workspace in bytes.
//  - Every call throws moegemm::Error before any launch when an operand does not fit; the message names
//    the operand, what was expected and what was given.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "moegemm/error.hpp"
#include "moegemm/tensor.hpp"

namespace moegemm {

/// Largest number of experts any op accepts.
inline constexpr int64_t kMaxExperts = 1024;

/// Storage of the expert weights.
enum class BLayout : uint8_t {
  nk,  ///< (E, N, K) row-major, K contiguous (cuDNN/DeepGEMM "NT"): G = A @ B_g^T
  kn,  ///< (E, K, N) row-major, N contiguous (jax.lax.ragged_dot, torch._grouped_mm): G = A @ B_g
};

/// Gated activations of the GLU ops (docs/ops.md §2).
enum class Activation : uint8_t {
  swiglu,          ///< D = prob * silu(gate) * up
  geglu,           ///< D = prob * gelu_tanh(gate) * up
  swiglu_clamped,  ///< g' = min(gate, limit), u' = clamp(up, -limit, limit),
                   ///< D = prob * (u' + linear_offset) * g' * sigmoid(act_alpha * g')  (gpt-oss)
};

/// Which pre-activation columns pair up (N = 2I pre-activation columns -> I output columns). halves needs
/// I % 8 == 0 for 16-bit d, c and dc (I % 4 for f32), the interleaved layouts 2I % 64 == 0 (invalid_argument).
enum class GluLayout : uint8_t {
  halves,                  ///< gate = columns [0, I), up = columns [I, 2I)
  interleaved32,           ///< 32-column blocks: block 2j = gate, 2j+1 = up (cuDNN grouped convention)
  interleaved32_up_first,  ///< 32-column blocks: block 2j = up, 2j+1 = gate (cuDNN dense gemm_swiglu)
};

/// The GLU ops' options (docs/ops.md §2). The three floats are used as f32, also for f64 host inputs, and only by
/// swiglu_clamped, which needs limit > 0 and a finite act_alpha and linear_offset (invalid_argument otherwise; an
/// infinite limit clamps nothing); swiglu and geglu neither use nor check them.
struct GluParams {
  Activation activation = Activation::swiglu;
  GluLayout layout = GluLayout::halves;
  float limit = 7.0f;          ///< swiglu_clamped only
  float act_alpha = 1.702f;    ///< swiglu_clamped only
  float linear_offset = 1.0f;  ///< swiglu_clamped only
};

/// Expert weights: a dense tensor or per-expert pointers (exactly one of the two).
struct ExpertWeights {
  TensorView dense;                 ///< (E, N, K) for nk, (E, K, N) for kn; bf16 or f16, same dtype as A;
                                    ///< unit last stride, padded rows and any positive expert stride, both
                                    ///< strides multiples of 16 bytes and, on cuda, below 2^40 bytes
                                    ///< (unsupported past it) (docs/ops.md §0.2, rules 5-6)
  TensorView ptrs;                  ///< (E,) int64: per-expert base address of a row-major (N, K) (nk) or
                                    ///< (K, N) (kn) matrix, 16-byte aligned, kept alive by the caller
  BLayout layout = BLayout::nk;
  int64_t n = 0;                    ///< N; required with ptrs (taken from dense otherwise)
  DType dtype = DType::bf16;        ///< element type behind ptrs (taken from dense otherwise)
};

/// §1 grouped_gemm. G[r,:] = alpha[g] * A[r,:] @ B_g^T + bias[g,:];  D = prob[r] * G;  C = G.
struct GroupedGemmArgs {
  TensorView a;        ///< (M, K) row-major or column-major (stride(0) == 1; docs/ops.md §1), bf16/f16
  ExpertWeights b;     ///< N columns
  TensorView offsets;  ///< (E,) int32
  TensorView alpha;    ///< optional (E,) f32, default 1
  TensorView prob;     ///< optional (M,) f32, default 1; scales D only
  TensorView bias;     ///< optional (E, N) bf16/f32, added before prob; on cuda with contiguous rows
                       ///< (stride(0) == N, unsupported otherwise), as for every grouped op's bias
  TensorView d;        ///< out (M, N) bf16/f16/f32
  TensorView c;        ///< optional out (M, N) bf16/f16/f32: generate_c
  bool zero_tail = false;  ///< zeros to the rows at or past offsets[E-1] of every row-indexed output (every op's)
  bool validate = false;  ///< host check of offsets first (synchronises for device offsets; every op's)
};

/// §2 grouped_gemm_glu. G as in §1 with N = 2I; D = prob * act(gate, up) (M, I); C = G (M, 2I).
struct GroupedGemmGluArgs {
  TensorView a;        ///< (M, K)
  ExpertWeights b;     ///< N = 2I
  TensorView offsets;  ///< (E,) int32
  TensorView alpha;    ///< optional (E,) f32
  TensorView prob;     ///< optional (M,) f32
  TensorView bias;     ///< optional (E, 2I)
  GluParams glu;
  TensorView d;        ///< out (M, I)
  TensorView c;        ///< optional out (M, 2I)
  bool zero_tail = false;
  bool validate = false;
};

/// §3 grouped_gemm_dglu. dH = alpha[g] * A @ B_g^T (M, I) (alpha applied once, see docs/ops.md);
/// c_g = beta[g] * C; h = act(gate, up);
/// dC = [d_gate, d_up] in C's layout with d_gate = dH*prob*dact/dgate, d_up = dH*prob*dact/dup;
/// dprob[r] = sum_cols h * dH; dbias[g,:] = sum over expert rows of dC; amax = [max|d_gate|, max|d_up|].
struct GroupedGemmDgluArgs {
  TensorView a;        ///< (M, K): the incoming gradient dY
  ExpertWeights b;     ///< N = I
  TensorView c;        ///< (M, 2I) saved pre-activation, bf16/f16/f32
  TensorView offsets;  ///< (E,) int32
  TensorView alpha;    ///< optional (E,) f32
  TensorView beta;     ///< optional (E,) f32, scales C
  TensorView prob;     ///< optional (M,) f32
  GluParams glu;
  TensorView dc;       ///< out (M, 2I)
  TensorView dprob;    ///< optional out (M,) f32
  TensorView dbias;    ///< optional out (E, 2I) f32/bf16
  TensorView amax;     ///< optional out (2,) f32
  bool zero_tail = false;
  bool validate = false;
};

/// §4 grouped_gemm_srelu. G as in §1; C = G; D = prob * relu(G)^2.
struct GroupedGemmSreluArgs {
  TensorView a;        ///< (M, K)
  ExpertWeights b;     ///< N columns
  TensorView offsets;  ///< (E,) int32
  TensorView alpha;    ///< optional (E,) f32
  TensorView prob;     ///< optional (M,) f32; scales D only
  TensorView bias;     ///< optional (E, N) bf16/f32, added before the activation
  TensorView d;        ///< out (M, N)
  TensorView c;        ///< optional out (M, N)
  bool zero_tail = false;
  bool validate = false;
};

/// §4 grouped_gemm_dsrelu. dH = alpha[g] * A @ B_g^T; dC = 2 relu(C) dH prob;
/// dprob = sum_cols relu(C)^2 dH; dbias = per-expert column sums of dC; amax = max|dC|.
struct GroupedGemmDsreluArgs {
  TensorView a;        ///< (M, K) incoming gradient
  ExpertWeights b;     ///< N columns
  TensorView c;        ///< (M, N) saved pre-activation, bf16/f16/f32
  TensorView offsets;  ///< (E,) int32
  TensorView alpha;    ///< optional (E,) f32
  TensorView prob;     ///< optional (M,) f32
  TensorView dc;       ///< out (M, N)
  TensorView dprob;    ///< optional out (M,) f32
  TensorView dbias;    ///< optional out (E, N) f32/bf16
  TensorView amax;     ///< optional out (1,) f32
  bool zero_tail = false;
  bool validate = false;
};

/// §5 grouped_gemm_wgrad. W_g = X[rows_g]^T @ dY[rows_g] (H, N), or its transpose (N, H).
/// Experts with no rows get exact zeros, unless accumulate (then they are left untouched).
struct GroupedGemmWgradArgs {
  TensorView x;        ///< (M, H) row-major, bf16/f16
  TensorView dy;       ///< (M, N) row-major, same dtype
  TensorView offsets;  ///< (E,) int32
  TensorView w;        ///< out dense (E, H, N), or (E, N, H) with transpose_output; contiguous; f32/bf16/f16
  TensorView w_ptrs;   ///< or (E,) int64 addresses of per-expert row-major buffers of that shape, 16-byte aligned
  DType w_dtype = DType::f32;  ///< element type behind w_ptrs: f32/bf16/f16
  bool transpose_output = false;
  bool accumulate = false;     ///< W_g += X^T dY instead of W_g = X^T dY
  /// Optional, with accumulate and a dense w only: the gradient to add into, when it is held in another buffer
  /// than w (an XLA call whose output aliasing was not kept). w's shape and dtype; w itself (a packed view at w's
  /// address), or another packed, 16-byte aligned tensor disjoint from w, copied into w on the stream first.
  TensorView w_in;
  bool validate = false;
};

/// §6 gemm_swiglu. ab12 = alpha * A @ B^T (M, N); c = up * silu(gate) (M, N/2).
struct GemmSwigluArgs {
  TensorView a;        ///< (M, K)
  TensorView b;        ///< (N, K) for nk, (K, N) for kn
  BLayout b_layout = BLayout::nk;
  float alpha = 1.0f;  ///< scales the GEMM term
  GluLayout layout = GluLayout::interleaved32_up_first;  ///< the default needs N % 64 == 0 (GluLayout)
  TensorView ab12;     ///< out (M, N) f32/bf16/f16
  TensorView c;        ///< out (M, N/2) bf16/f16/f32
};

/// §6 gemm_amax. C = A @ B^T; amax = max |C| (written even for M = 0: then 0).
struct GemmAmaxArgs {
  TensorView a;        ///< (M, K)
  TensorView b;        ///< (N, K) for nk, (K, N) for kn
  BLayout b_layout = BLayout::nk;
  TensorView c;        ///< out (M, N) bf16/f16/f32
  TensorView amax;     ///< out (1,) f32
};

/// §6 gemm_srelu: §4 forward with one group; alpha is a scalar.
struct GemmSreluArgs {
  TensorView a;        ///< (M, K)
  TensorView b;        ///< (N, K) for nk, (K, N) for kn
  BLayout b_layout = BLayout::nk;
  float alpha = 1.0f;  ///< scales the GEMM term
  TensorView prob;     ///< optional (M,) f32; scales D only
  TensorView bias;     ///< optional (N,) bf16/f32, added before the activation
  TensorView d;        ///< out (M, N)
  TensorView c;        ///< optional out (M, N)
};

/// §6 gemm_dsrelu: §4 backward with one group.
struct GemmDsreluArgs {
  TensorView a;        ///< (M, K) incoming gradient
  TensorView b;        ///< (N, K) for nk, (K, N) for kn
  BLayout b_layout = BLayout::nk;
  float alpha = 1.0f;  ///< scales the GEMM term
  TensorView c;        ///< (M, N) saved pre-activation
  TensorView prob;     ///< optional (M,) f32
  TensorView dc;       ///< out (M, N)
  TensorView dprob;    ///< optional out (M,) f32
  TensorView dbias;    ///< optional out (N,) f32/bf16: the column sums of dC
  TensorView amax;     ///< optional out (1,) f32: max|dC|
};

// Every op: `X_workspace_bytes(args)` gives the scratch the call needs, in bytes of device memory (0 for host
// calls). It depends only on shapes, dtypes and options (and on the tuning override MOEGEMM_TILE_ORDER where it
// is set, docs/kernels.md): it makes the contract checks but not the pointer rules, nor the device check below.
// The workspace needs no initialisation.
// `X(args, workspace, workspace_bytes, stream)` checks the contract, then runs on the backend of its
// tensors. Device calls are asynchronous on `stream` and never synchronise (unless validate).
// Throws Error: invalid_argument for operands that break the contract (docs/ops.md §0.2), and for a device call
// given less than X_workspace_bytes(args) (or a null workspace where that is > 0); unsupported for what the
// backend lacks: f16/f32/f64 inputs on cuda tensors, 8-bit or FP4 inputs on either backend, on cuda an M, N, K,
// H or the dGLU's 2I past 2147483647, a B stride of 2^40 bytes or more or a bias without contiguous rows, and a
// current device that is not compute capability 9.0 (raised by X and X_check, not by the workspace query);
// cuda_error when a CUDA call fails; std::bad_alloc (not Error) where a host call cannot allocate its threads'
// scratch (docs/cpp.md). An output that shares memory with another output or an input (w with accumulate is one
// operand) is invalid_argument naming both (docs/ops.md §0.2, rule 9; pointer-table buffers and the workspace
// are not checked).
// `X_check(args, stream)` makes every check X(args, ...) makes before it launches, for a call whose outputs
// are not allocated yet: an output with null data is taken as one still to come (its shape, dtype, strides
// and options are checked; its pointer rules and aliasing are not; w with accumulate is read, so it must be
// given), every other operand gets the pointer rules, and validate=true reads the offsets on `stream` as the
// op does (synchronising it). It returns X_workspace_bytes(args) and throws what X would. Bindings run it
// before they allocate outputs, so that a call the op refuses gets the op's error, not an allocator's; the
// call that follows may then pass validate=false.
std::size_t grouped_gemm_workspace_bytes(const GroupedGemmArgs& args);
std::size_t grouped_gemm_check(const GroupedGemmArgs& args, cudaStream_t stream);
void grouped_gemm(const GroupedGemmArgs& args, void* workspace, std::size_t workspace_bytes,
                  cudaStream_t stream);

std::size_t grouped_gemm_glu_workspace_bytes(const GroupedGemmGluArgs& args);
std::size_t grouped_gemm_glu_check(const GroupedGemmGluArgs& args, cudaStream_t stream);
void grouped_gemm_glu(const GroupedGemmGluArgs& args, void* workspace, std::size_t workspace_bytes,
                      cudaStream_t stream);

std::size_t grouped_gemm_dglu_workspace_bytes(const GroupedGemmDgluArgs& args);
std::size_t grouped_gemm_dglu_check(const GroupedGemmDgluArgs& args, cudaStream_t stream);
void grouped_gemm_dglu(const GroupedGemmDgluArgs& args, void* workspace, std::size_t workspace_bytes,
                       cudaStream_t stream);

std::size_t grouped_gemm_srelu_workspace_bytes(const GroupedGemmSreluArgs& args);
std::size_t grouped_gemm_srelu_check(const GroupedGemmSreluArgs& args, cudaStream_t stream);
void grouped_gemm_srelu(const GroupedGemmSreluArgs& args, void* workspace, std::size_t workspace_bytes,
                        cudaStream_t stream);

std::size_t grouped_gemm_dsrelu_workspace_bytes(const GroupedGemmDsreluArgs& args);
std::size_t grouped_gemm_dsrelu_check(const GroupedGemmDsreluArgs& args, cudaStream_t stream);
void grouped_gemm_dsrelu(const GroupedGemmDsreluArgs& args, void* workspace,
                         std::size_t workspace_bytes, cudaStream_t stream);

std::size_t grouped_gemm_wgrad_workspace_bytes(const GroupedGemmWgradArgs& args);
std::size_t grouped_gemm_wgrad_check(const GroupedGemmWgradArgs& args, cudaStream_t stream);
void grouped_gemm_wgrad(const GroupedGemmWgradArgs& args, void* workspace, std::size_t workspace_bytes,
                        cudaStream_t stream);

std::size_t gemm_swiglu_workspace_bytes(const GemmSwigluArgs& args);
std::size_t gemm_swiglu_check(const GemmSwigluArgs& args, cudaStream_t stream);
void gemm_swiglu(const GemmSwigluArgs& args, void* workspace, std::size_t workspace_bytes,
                 cudaStream_t stream);

std::size_t gemm_amax_workspace_bytes(const GemmAmaxArgs& args);
std::size_t gemm_amax_check(const GemmAmaxArgs& args, cudaStream_t stream);
void gemm_amax(const GemmAmaxArgs& args, void* workspace, std::size_t workspace_bytes,
               cudaStream_t stream);

std::size_t gemm_srelu_workspace_bytes(const GemmSreluArgs& args);
std::size_t gemm_srelu_check(const GemmSreluArgs& args, cudaStream_t stream);
void gemm_srelu(const GemmSreluArgs& args, void* workspace, std::size_t workspace_bytes,
                cudaStream_t stream);

std::size_t gemm_dsrelu_workspace_bytes(const GemmDsreluArgs& args);
std::size_t gemm_dsrelu_check(const GemmDsreluArgs& args, cudaStream_t stream);
void gemm_dsrelu(const GemmDsreluArgs& args, void* workspace, std::size_t workspace_bytes,
                 cudaStream_t stream);

/// Host check of offsets against M (opt-in; copies device offsets to the host on the legacy default stream and
/// synchronises it). Throws Error(invalid_argument) for offsets that are not a contiguous (E,) i32 vector with
/// 1 <= E <= kMaxExperts, for M < 0, and naming the first bad index: negative, decreasing, or past M;
/// Error(cuda_error) when the copy fails.
void validate_offsets(const TensorView& offsets, int64_t M);

/// Whether this process can run the device kernels on the current device (the kernels were built and the
/// current device is an sm_90 GPU).
bool device_kernels_available();

}  // namespace moegemm
