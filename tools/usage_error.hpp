// The one failure the program answers with exit code 2: the command line (or a file it names) is wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace moegemm::cli {

/// Bad arguments: unknown flag or model, bad number, unreadable/unwritable path, malformed workloads file.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace moegemm::cli
