// Asserting a rejected call: the moegemm::Error it throws, its code and what its message names.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

#include "moegemm/error.hpp"

namespace moegemm::testing {

/// Runs `call`, which must throw Error with `code` and a message containing every fragment.
inline void expect_error(const std::function<void()>& call, ErrorCode code,
                         std::initializer_list<std::string> fragments) {
  try {
    call();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << e.what();
    for (const std::string& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos)
        << "message lacks \"" << f << "\": " << e.what();
    return;
  }
  ADD_FAILURE() << "no Error thrown";
}

}  // namespace moegemm::testing
