// Names of the element types, as error messages and the bindings spell them.
#include "moegemm/dtype_names.hpp"

#include <cctype>

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

namespace {

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

std::string respell_dtypes(std::string_view message, std::string (*spell)(DType)) {
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
    const bool dotted = i > 0 && message[i - 1] == '.';  // part of a dotted name, e.g. torch.float32
    const DType* match = nullptr;
    for (const DType& t : kAllDTypes) {
      if (!dotted && word == dtype_name(t)) match = &t;
    }
    if (match) out += spell(*match);
    else out += word;
    i = end;
  }
  return out;
}

}  // namespace moegemm
