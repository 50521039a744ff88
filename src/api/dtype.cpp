// Names of the element types, as error messages and the bindings spell them.
#include "moegemm/tensor.hpp"

namespace moegemm {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::e4m3: return "e4m3";
    case DType::e5m2: return "e5m2";
    case DType::e2m1: return "e2m1";
  }
  return "unknown";
}

}  // namespace moegemm
