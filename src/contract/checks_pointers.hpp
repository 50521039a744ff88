// contract::check with a choice of whether the pointer rules run (see Pointers in rules.hpp).
// check(args) == check(args, Pointers::check); workspace queries use Pointers::ignore so that they depend
// only on shapes, dtypes and options.
#pragma once

#include "contract/checks.hpp"
#include "contract/rules.hpp"

namespace moegemm::contract {

Device check(const GroupedGemmArgs& args, Pointers pointers);
Device check(const GroupedGemmGluArgs& args, Pointers pointers);
Device check(const GroupedGemmDgluArgs& args, Pointers pointers);
Device check(const GroupedGemmSreluArgs& args, Pointers pointers);
Device check(const GroupedGemmDsreluArgs& args, Pointers pointers);
Device check(const GroupedGemmWgradArgs& args, Pointers pointers);
Device check(const GemmSwigluArgs& args, Pointers pointers);
Device check(const GemmAmaxArgs& args, Pointers pointers);
Device check(const GemmSreluArgs& args, Pointers pointers);
Device check(const GemmDsreluArgs& args, Pointers pointers);

}  // namespace moegemm::contract
