#include "messages.hpp"

#include "moegemm/dtype_names.hpp"

#include <cstring>

namespace moegemm::jax_binding {

namespace {

std::string numpy_name(DType t) {
  switch (t) {
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::u8: return "uint8";
    case DType::e4m3: return "float8_e4m3fn";
    case DType::e5m2: return "float8_e5m2";
    case DType::e2m1: return "float4_e2m1fn";
  }
  return dtype_name(t);
}

}  // namespace

std::string jax_message(const Error& e) { return respell_dtypes(e.what(), numpy_name); }

void write_message(char* err, std::size_t err_len, const std::string& message) {
  if (!err || err_len == 0) return;
  std::strncpy(err, message.c_str(), err_len - 1);
  err[err_len - 1] = '\0';
}

}  // namespace moegemm::jax_binding
