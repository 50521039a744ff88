// moegemm: Mixture-of-Experts grouped GEMMs with fused epilogues for Hopper (sm_90a).
#pragma once

#include "moegemm/dtype_names.hpp"
#include "moegemm/error.hpp"
#include "moegemm/ops.hpp"
#include "moegemm/tensor.hpp"
#include "moegemm/version.hpp"
