// The library's error messages as JAX users read them.
#pragma once

#include <string>

#include "moegemm/error.hpp"

namespace moegemm::jax_binding {

/// e.what() with the library's dtype names (bf16, i32, ...) spelled as numpy and JAX spell them
/// (bfloat16, int32, ...), as the front end's own trace-time checks do.
std::string jax_message(const Error& e);

}  // namespace moegemm::jax_binding
