// C ABI of the binding library for Python (ctypes), used at trace time:
//   moegemm_jax_workspace_bytes: the workspace size of a call described by shapes, dtypes and options;
//   it also runs the op's contract checks, so bad operands are reported before anything is lowered.
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>

#include "messages.hpp"
#include "op_table.hpp"

namespace moegemm::jax_binding {

namespace {

/// Options from "key=value;key=value" (bools as 0/1, floats in decimal).
class TextOptions final : public Options {
 public:
  explicit TextOptions(const char* text) {
    std::string s = text ? text : "";
    std::size_t pos = 0;
    while (pos < s.size()) {
      std::size_t end = s.find(';', pos);
      if (end == std::string::npos) end = s.size();
      const std::string item = s.substr(pos, end - pos);
      const std::size_t eq = item.find('=');
      if (eq != std::string::npos) values_[item.substr(0, eq)] = item.substr(eq + 1);
      pos = end + 1;
    }
  }
  bool flag(std::string_view name) const override {
    const std::string& v = get(name);
    if (v == "1") return true;
    if (v == "0") return false;
    throw Error(ErrorCode::invalid_argument, "attribute " + std::string(name) + ": expected 0 or 1, got " + v);
  }
  float real(std::string_view name) const override {
    const std::string& v = get(name);
    char* end = nullptr;
    const float f = std::strtof(v.c_str(), &end);
    if (end == v.c_str() || *end != '\0') {
      throw Error(ErrorCode::invalid_argument, "attribute " + std::string(name) + ": expected a number, got " + v);
    }
    return f;
  }
  std::string text(std::string_view name) const override { return get(name); }

 private:
  const std::string& get(std::string_view name) const {
    auto it = values_.find(std::string(name));
    if (it == values_.end()) {
      throw Error(ErrorCode::invalid_argument, "attribute " + std::string(name) + " is missing");
    }
    return it->second;
  }
  std::map<std::string, std::string> values_;
};

DType dtype_named(const char* name) {
  static const std::map<std::string, DType> kNames = {
      {"bfloat16", DType::bf16}, {"float16", DType::f16},         {"float32", DType::f32},
      {"float64", DType::f64},   {"int32", DType::i32},           {"int64", DType::i64},
      {"uint8", DType::u8},      {"float8_e4m3fn", DType::e4m3}, {"float8_e5m2", DType::e5m2}};
  auto it = kNames.find(name ? name : "");
  if (it == kNames.end()) {
    throw Error(ErrorCode::invalid_argument,
                std::string("dtype: ") + (name ? name : "(null)") + " has no moegemm dtype");
  }
  return it->second;
}

// A placeholder address: non-null and 256-byte aligned, never dereferenced (sizes depend on shapes only).
void* const kPlaceholder = reinterpret_cast<void*>(std::uintptr_t{1} << 20);

std::vector<TensorView> views(int32_t n, const char* const* dtypes, const int32_t* ranks,
                              const int64_t* dims, Device device) {
  std::vector<TensorView> out;
  for (int32_t i = 0; i < n; ++i) {
    TensorView v;
    v.data = kPlaceholder;
    v.dtype = dtype_named(dtypes[i]);
    v.device = device;
    v.rank = ranks[i];
    if (v.rank < 1 || v.rank > TensorView::kMaxRank) {
      throw Error(ErrorCode::invalid_argument, "operand " + std::to_string(i) + ": expected rank 1..4, got " +
                                                   std::to_string(v.rank));
    }
    int64_t stride = 1;
    for (int d = v.rank - 1; d >= 0; --d) {
      v.shape[d] = dims[i * TensorView::kMaxRank + d];
      v.strides[d] = stride;
      stride *= v.shape[d];
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

}  // namespace moegemm::jax_binding

/// Workspace bytes of op `op` for the operands described by dtype names (numpy spelling), ranks and
/// dims (kMaxRank = 4 entries per operand, the first `rank` used) and the attribute text
/// "key=value;...". Sizes are those of the device kernels (the host backend needs none); when the device
/// path reports `unsupported` (a build without that kernel), the host size is returned.
/// Returns 0 and sets *bytes on success; returns 1 (invalid argument) or 2 (other error) and writes the
/// message into err (nul-terminated, truncated to err_len).
extern "C" int moegemm_jax_workspace_bytes(const char* op, const char* attrs, int32_t n_in,
                                           const char* const* in_dtypes, const int32_t* in_ranks,
                                           const int64_t* in_dims, int32_t n_out,
                                           const char* const* out_dtypes, const int32_t* out_ranks,
                                           const int64_t* out_dims, uint64_t* bytes, char* err,
                                           std::size_t err_len) {
  using namespace moegemm;
  using namespace moegemm::jax_binding;
  try {
    const OpEntry& entry = find_op(op ? op : "");
    const TextOptions options(attrs);
    auto describe = [&](Device device) {
      Operands ops;
      ops.in = views(n_in, in_dtypes, in_ranks, in_dims, device);
      ops.out = views(n_out, out_dtypes, out_ranks, out_dims, device);
      return ops;
    };
    try {
      *bytes = entry.workspace_bytes(describe(Device::cuda), options);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::unsupported) throw;
      *bytes = entry.workspace_bytes(describe(Device::host), options);
    }
    return 0;
  } catch (const Error& e) {
    write_message(err, err_len, jax_message(e));
    return e.code() == ErrorCode::invalid_argument ? 1 : 2;
  } catch (const std::exception& e) {
    write_message(err, err_len, e.what());
    return 2;
  }
}

/// 1 when this process can run the device kernels (moegemm::device_kernels_available), else 0.
extern "C" int moegemm_jax_device_kernels_available() {
  try {
    return moegemm::device_kernels_available() ? 1 : 0;
  } catch (...) {
    return 0;
  }
}
