// Contract checks shared by every op and binding (host only, before any launch).
#pragma once

#include "moegemm/ops.hpp"

namespace moegemm::contract {

/// Check every operand of the op against docs/ops.md: ranks, shapes, dtypes, strides, 16-byte
/// alignment, E <= kMaxExperts, supported combinations, and that all tensors share one backend.
/// Returns that backend. Throws Error naming the operand, what was expected and what was given.
Device check(const GroupedGemmArgs& args);
Device check(const GroupedGemmGluArgs& args);
Device check(const GroupedGemmDgluArgs& args);
Device check(const GroupedGemmSreluArgs& args);
Device check(const GroupedGemmDsreluArgs& args);
Device check(const GroupedGemmWgradArgs& args);
Device check(const GemmSwigluArgs& args);
Device check(const GemmAmaxArgs& args);
Device check(const GemmSreluArgs& args);
Device check(const GemmDsreluArgs& args);

}  // namespace moegemm::contract
