// The library's error messages as JAX users read them.
#pragma once

#include <cstddef>
#include <string>

#include "moegemm/error.hpp"

namespace moegemm::jax_binding {

/// e.what() with the library's dtype names (bf16, i32, ...) spelled as numpy and JAX spell them
/// (bfloat16, int32, ...), as the front end's own trace-time checks do.
std::string jax_message(const Error& e);

/// Copies `message` into the C caller's buffer err (nul-terminated, truncated to err_len; nothing when err is
/// null or err_len is 0).
void write_message(char* err, std::size_t err_len, const std::string& message);

}  // namespace moegemm::jax_binding
