#include "errors.hpp"

#include <c10/core/ScalarType.h>

#include "moegemm/dtype_names.hpp"
#include "tensor_view.hpp"

namespace moegemm::torch_ops {

namespace {

std::string torch_name(DType t) {
  return "torch." + std::string(c10::getDtypeNames(scalar_type_of(t)).first);
}

}  // namespace

std::string torch_dtype_spelling(std::string_view message) { return respell_dtypes(message, torch_name); }

}  // namespace moegemm::torch_ops
