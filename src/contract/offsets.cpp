#include "contract/offsets.hpp"

#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "contract/rules.hpp"
#include "moegemm/ops.hpp"

namespace moegemm::contract {

void check_offsets_values(const char* op, const TensorView& offsets, int64_t M, cudaStream_t stream) {
  Rules r(op, Pointers::check);
  r.place({{"offsets", &offsets, Role::input}});  // a device value outside the enum is refused, not read as host
  r.shape("offsets", offsets, {{"E"}});
  const int64_t E = offsets.shape[0];
  if (E < 1 || E > kMaxExperts) {
    r.fail(ErrorCode::invalid_argument, "offsets", "1 <= E <= " + std::to_string(kMaxExperts) + " experts",
           "E=" + std::to_string(E));
  }
  r.dtype_is("offsets", offsets.dtype, DType::i32);
  r.vector("offsets", offsets);
  if (M < 0) r.fail(ErrorCode::invalid_argument, "M", "M >= 0", "M=" + std::to_string(M));

  std::vector<int32_t> copy;
  const int32_t* ends = offsets.ptr<const int32_t>();
  if (offsets.device == Device::cuda) {
    copy.resize(static_cast<std::size_t>(E));
    cudaError_t status = cudaMemcpyAsync(copy.data(), offsets.data, copy.size() * sizeof(int32_t),
                                         cudaMemcpyDeviceToHost, stream);
    if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
    if (status != cudaSuccess) {
      throw Error(ErrorCode::cuda_error, std::string(op) + ": offsets: copying to the host for validation "
                                             "failed: " + cudaGetErrorString(status));
    }
    ends = copy.data();
  }
  int64_t previous = 0;
  for (int64_t g = 0; g < E; ++g) {
    const int64_t end = ends[g];
    const std::string broken = end < 0          ? ">= 0"
                               : end < previous ? ">= the one before it"
                               : end > M        ? "<= M"
                                                : "";
    if (broken.empty()) {
      previous = end;
      continue;
    }
    std::string got = "offsets[" + std::to_string(g) + "] = " + std::to_string(end);
    if (end >= 0 && end < previous) got += " < offsets[" + std::to_string(g - 1) + "] = " + std::to_string(previous);
    r.fail(ErrorCode::invalid_argument, "offsets",
           "non-decreasing expert end rows in [0, M=" + std::to_string(M) + "], each " + broken,
           got);
  }
}

}  // namespace moegemm::contract
