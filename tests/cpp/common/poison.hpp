// Poisoning outputs before a call: every byte of the storage (padding included) gets a signalling-NaN
// pattern that arithmetic never produces, so "still poisoned" proves "never written".
#pragma once

#include <cstdint>

#include "common/host_tensor.hpp"

namespace moegemm::testing {

/// The sentinel bit pattern of a dtype (a signalling NaN with a recognisable payload).
inline uint64_t poison_bits(DType t) {
  switch (t) {
    case DType::bf16: return 0x7fa5;
    case DType::f16: return 0x7d5a;
    case DType::f32: return 0x7fa5a5a5u;
    case DType::f64: return 0x7ff4a5a5a5a5a5a5ull;
    case DType::i32: return 0xa5a5a5a5u;
    case DType::i64: return 0xa5a5a5a5a5a5a5a5ull;
    default: return 0xa5;
  }
}

/// Fill the whole storage with the sentinel.
inline void poison(HostTensor& t) {
  const uint64_t b = poison_bits(t.dtype());
  for (int64_t i = 0; i < t.storage_elems(); ++i) t.set_bits_at(i, b);
}

inline bool is_poison(const HostTensor& t, int64_t off) { return t.bits_at(off) == poison_bits(t.dtype()); }

}  // namespace moegemm::testing
