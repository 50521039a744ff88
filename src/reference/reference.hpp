// CPU reference of every op: the oracle of the GPU kernels and the CPU backend of both bindings.
// Inputs are contract-checked host tensors. Accumulation in f32; writes exactly what docs/ops.md says.
#pragma once

#include "moegemm/ops.hpp"

namespace moegemm::reference {

void run(const GroupedGemmArgs& args);
void run(const GroupedGemmGluArgs& args);
void run(const GroupedGemmDgluArgs& args);
void run(const GroupedGemmSreluArgs& args);
void run(const GroupedGemmDsreluArgs& args);
void run(const GroupedGemmWgradArgs& args);
void run(const GemmSwigluArgs& args);
void run(const GemmAmaxArgs& args);
void run(const GemmSreluArgs& args);
void run(const GemmDsreluArgs& args);

}  // namespace moegemm::reference
