// Decoding of XLA FFI buffers and attributes into moegemm views and options.
#include "ffi_decode.hpp"

#include "messages.hpp"

#include <string>

namespace moegemm::jax_binding {

namespace {

bool dtype_of(ffi::DataType t, DType* out) {
  switch (t) {
    case ffi::DataType::BF16: *out = DType::bf16; return true;
    case ffi::DataType::F16: *out = DType::f16; return true;
    case ffi::DataType::F32: *out = DType::f32; return true;
    case ffi::DataType::F64: *out = DType::f64; return true;
    case ffi::DataType::S32: *out = DType::i32; return true;
    case ffi::DataType::S64: *out = DType::i64; return true;
    case ffi::DataType::U8: *out = DType::u8; return true;
    case ffi::DataType::F8E4M3FN: *out = DType::e4m3; return true;
    case ffi::DataType::F8E5M2: *out = DType::e5m2; return true;
    default: return false;
  }
}

template <class T>
T attribute(const ffi::Dictionary& attrs, std::string_view name, const char* type) {
  auto value = attrs.get<T>(name);
  if (value.has_error()) {
    throw Error(ErrorCode::invalid_argument, "attribute " + std::string(name) + ": expected an attribute of type " +
                                                 type + ", got " + value.error().message());
  }
  return value.value();
}

}  // namespace

TensorView view_of(const ffi::AnyBuffer& buffer, Device device, const char* what) {
  TensorView v;
  if (!dtype_of(buffer.element_type(), &v.dtype)) {
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": element type (XLA code " +
                    std::to_string(static_cast<int>(buffer.element_type())) + ") has no moegemm dtype");
  }
  const auto dims = buffer.dimensions();
  const int rank = static_cast<int>(dims.size());
  if (rank < 1 || rank > TensorView::kMaxRank) {
    throw Error(ErrorCode::invalid_argument,
                std::string(what) + ": expected rank 1..4, got rank " + std::to_string(rank));
  }
  v.data = buffer.untyped_data();
  v.device = device;
  v.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    v.shape[d] = dims[d];
    v.strides[d] = stride;
    stride *= dims[d];
  }
  return v;
}

bool FfiOptions::flag(std::string_view name) const { return attribute<bool>(attrs_, name, "bool"); }

float FfiOptions::real(std::string_view name) const { return attribute<float>(attrs_, name, "float32"); }

int64_t FfiOptions::count(std::string_view name) const { return attribute<int64_t>(attrs_, name, "i64"); }

std::string FfiOptions::text(std::string_view name) const {
  return std::string(attribute<std::string_view>(attrs_, name, "string"));
}

DecodedCall decode_call(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets, Device device) {
  DecodedCall call;
  for (std::size_t i = 0; i < args.size(); ++i) {
    auto buffer = args.get<ffi::AnyBuffer>(i);
    const std::string what = "input " + std::to_string(i);
    if (buffer.has_error()) throw Error(ErrorCode::invalid_argument, what + ": expected a buffer");
    call.operands.in.push_back(view_of(buffer.value(), device, what.c_str()));
  }
  if (rets.size() == 0) {
    throw Error(ErrorCode::invalid_argument, "workspace: expected a u8 buffer as the last output, got no output");
  }
  for (std::size_t i = 0; i + 1 < rets.size(); ++i) {
    auto buffer = rets.get<ffi::AnyBuffer>(i);
    const std::string what = "output " + std::to_string(i);
    if (buffer.has_error()) throw Error(ErrorCode::invalid_argument, what + ": expected a buffer");
    call.operands.out.push_back(view_of(*buffer.value(), device, what.c_str()));
  }
  auto workspace = rets.get<ffi::AnyBuffer>(rets.size() - 1);
  if (workspace.has_error() || workspace.value()->element_type() != ffi::DataType::U8) {
    throw Error(ErrorCode::invalid_argument, "workspace: expected a u8 buffer as the last output");
  }
  call.workspace = workspace.value()->untyped_data();
  call.workspace_bytes = workspace.value()->size_bytes();
  return call;
}

ffi::Error to_ffi_error(const Error& e) {
  switch (e.code()) {
    case ErrorCode::invalid_argument: return ffi::Error(ffi::ErrorCode::kInvalidArgument, jax_message(e));
    case ErrorCode::unsupported: return ffi::Error(ffi::ErrorCode::kUnimplemented, jax_message(e));
    default: return ffi::Error(ffi::ErrorCode::kInternal, jax_message(e));
  }
}

}  // namespace moegemm::jax_binding
