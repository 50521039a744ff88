#pragma once

#define MOEGEMM_VERSION_MAJOR 0
#define MOEGEMM_VERSION_MINOR 1
#define MOEGEMM_VERSION_PATCH 0

namespace moegemm {
inline constexpr const char* kVersion = "0.1.0";
}
