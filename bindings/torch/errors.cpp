#include "errors.hpp"

#include <c10/core/ScalarType.h>

#include <cctype>
#include <string>
#include <string_view>

#include "moegemm/tensor.hpp"
#include "tensor_view.hpp"

namespace moegemm::torch_ops {

namespace {

constexpr DType kDtypes[] = {DType::bf16, DType::f16, DType::f32, DType::f64, DType::i32,
                             DType::i64,  DType::u8,  DType::e4m3, DType::e5m2, DType::e2m1};

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

std::string torch_dtype_spelling(std::string_view message) {
  std::string out;
  out.reserve(message.size() + 32);
  std::size_t i = 0;
  while (i < message.size()) {
    if (!word_char(message[i])) {
      out += message[i++];
      continue;
    }
    std::size_t end = i;
    while (end < message.size() && word_char(message[end])) ++end;
    const std::string_view word = message.substr(i, end - i);
    // A word that follows a '.' is part of a dotted name (torch.float32), never a contract dtype.
    const bool dotted = i > 0 && message[i - 1] == '.';
    bool replaced = false;
    for (DType t : kDtypes) {
      if (!dotted && word == dtype_name(t)) {
        out += "torch.";
        out += c10::getDtypeNames(scalar_type_of(t)).first;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += word;
    i = end;
  }
  return out;
}

}  // namespace moegemm::torch_ops
