// Host side of the forward kernels: tensor maps, tile-shape choice and launch for grouped_gemm,
// grouped_gemm_glu and gemm_swiglu (the GLU kernel with one group).
#include <cuda.h>
#include <cudaTypedefs.h>

#include <mutex>
#include <string>

#include "sm90/expert_maps.cuh"
#include "sm90/heuristic.hpp"
#include "sm90/epilogues/glu.cuh"
#include "sm90/epilogues/linear.cuh"
#include "sm90/kernel.cuh"
#include "sm90/launch.hpp"
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

int sm_count() {
  int device = 0, sms = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return sms;
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
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(out.ld) * esize};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / esize), 64};
  return make_map(out.ptr, 2, dims, strides, box, operand, type);
}

template <class Shape, class Epilogue>
void launch_kernel(const KernelParams& p, int grid, cudaStream_t stream) {
  using Layout = SharedLayout<Shape>;
  auto kernel = grouped_gemm_kernel<Shape, Epilogue>;
  static std::once_flag once;
  std::call_once(once, [&] {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Layout::kAllocBytes),
               "cudaFuncSetAttribute(max dynamic shared memory)");
  });
  kernel<<<grid, kKernelThreads, Layout::kAllocBytes, stream>>>(p);
  check_cuda(cudaGetLastError(), "grouped GEMM kernel launch");
}

template <class Epilogue>
void dispatch(const KernelParams& p, int block_n, BLayout layout, int grid, cudaStream_t stream) {
  if (layout == BLayout::nk) {
    if (block_n == 256) launch_kernel<TileShape<256, BMajor::k>, Epilogue>(p, grid, stream);
    else launch_kernel<TileShape<128, BMajor::k>, Epilogue>(p, grid, stream);
  } else {
    if (block_n == 256) launch_kernel<TileShape<256, BMajor::n>, Epilogue>(p, grid, stream);
    else launch_kernel<TileShape<128, BMajor::n>, Epilogue>(p, grid, stream);
  }
}

}  // namespace

void launch_forward(const ForwardProblem& f, cudaStream_t stream) {
  if (f.m == 0) return;  // no rows: nothing is addressed, and there is no tail
  if (f.a.dtype != DType::bf16) {
    throw Error(ErrorCode::unsupported, std::string(f.op) + ": a: the sm_90a kernels take bf16 inputs, got " +
                                            dtype_name(f.a.dtype));
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
  p.act = static_cast<ActKind>(f.glu.activation);
  p.pairing = static_cast<PairKind>(f.glu.layout);
  p.limit = f.glu.limit;
  p.act_alpha = f.glu.act_alpha;
  p.linear_offset = f.glu.linear_offset;

  const int sms = sm_count();
  const int block_n = choose_tile(f.m, f.n, f.num_experts, sms).block_n;
  // Half tiles split columns between the warpgroups; a 128-wide halves GLU tile has only one gate box.
  p.half_tiles = !(f.glu_epilogue && f.glu.layout == GluLayout::halves && block_n == 128);
  if (f.glu_epilogue && f.glu.layout == GluLayout::halves) {
    p.n_tiles = static_cast<int>((f.n / 2 + block_n / 2 - 1) / (block_n / 2));
  } else {
    p.n_tiles = static_cast<int>((f.n + block_n - 1) / block_n);
  }

  const cuuint64_t a_dims[2] = {static_cast<cuuint64_t>(f.k), static_cast<cuuint64_t>(f.m)};
  const cuuint64_t a_strides[1] = {static_cast<cuuint64_t>(f.a.stride(0)) * 2};
  const cuuint32_t a_box[2] = {64, 128};
  p.tma_a = make_map(f.a.data, 2, a_dims, a_strides, a_box, "a");

  // B as a 3-D map (inner, outer, expert) so that N and K tails zero-fill inside each expert. Pointer-mode
  // weights get one map per expert (expert extent 1), made on the device from a template.
  const cuuint64_t e = f.b_ptrs ? 1 : static_cast<cuuint64_t>(f.num_experts);
  const void* b_base = f.b_ptrs ? f.workspace : f.b;  // the template's address is replaced per expert
  const cuuint32_t b_box[3] = {64, 64, 1};
  if (f.b_layout == BLayout::nk) {
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(f.k), static_cast<cuuint64_t>(f.n), e};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(f.k) * 2, static_cast<cuuint64_t>(f.n * f.k) * 2};
    p.tma_b = make_map(b_base, 3, dims, strides, b_box, "b");
  } else {
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(f.n), static_cast<cuuint64_t>(f.k), e};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(f.n) * 2, static_cast<cuuint64_t>(f.n * f.k) * 2};
    p.tma_b = make_map(b_base, 3, dims, strides, b_box, "b");
  }
  if (f.b_ptrs) p.b_maps = launch_expert_maps(p.tma_b, f.b_ptrs, p.num_experts, f.workspace, stream);

  p.tma_d = output_map(p.d, f.m, f.glu_epilogue ? f.n / 2 : f.n, "d");
  if (p.c.ptr) p.tma_c = output_map(p.c, f.m, f.n, "c");

  // Persistent grid: at most one CTA per SM, never more CTAs than the largest possible tile count.
  const int64_t max_tiles = ((f.m + 127) / 128 + std::min<int64_t>(f.num_experts, f.m)) * p.n_tiles;
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(sms, max_tiles)));
  if (f.glu_epilogue) dispatch<GluEpilogue>(p, block_n, f.b_layout, grid, stream);
  else dispatch<LinearEpilogue>(p, block_n, f.b_layout, grid, stream);

  if (f.zero_tail) {
    const int d_cols = static_cast<int>(f.glu_epilogue ? f.n / 2 : f.n);
    launch_zero_tail(p.d, d_cols, f.offsets, p.num_experts, p.m, stream);
    launch_zero_tail(p.c, static_cast<int>(f.n), f.offsets, p.num_experts, p.m, stream);
  }
}

}  // namespace moegemm::sm90
