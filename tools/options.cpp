#include "options.hpp"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <functional>
#include <limits>

#include <fcntl.h>
#include <unistd.h>

#include "moegemm/ops.hpp"
#include "usage_error.hpp"

namespace moegemm::cli {
namespace {

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min,
                  int64_t max = std::numeric_limits<int64_t>::max()) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range && end == text.data() + text.size()) {
    // Past int64 on either side: the bound on that side.
    if (text[0] == '-') throw UsageError(flag + ": must be >= " + std::to_string(min) + ", got " + text);
    throw UsageError(flag + ": must be <= " + std::to_string(max) + ", got " + text);
  }
  if (ec != std::errc() || end != text.data() + text.size())
    throw UsageError(flag + ": expected an integer, got '" + text + "'");
  if (v < min) throw UsageError(flag + ": must be >= " + std::to_string(min) + ", got " + text);
  if (v > max) throw UsageError(flag + ": must be <= " + std::to_string(max) + ", got " + text);
  return v;
}

/// An int flag (iteration counts): parse_int bounded by INT_MAX, so that the value is never truncated.
int parse_int32(const std::string& flag, const std::string& text, int min) {
  return static_cast<int>(parse_int(flag, text, min, std::numeric_limits<int>::max()));
}

using Handler = std::function<void(const std::string&)>;

// Walks `args` as "--flag value" or "--flag=value" pairs and hands each value to its flag's handler. A flag
// given twice is an error: which of its values counts would otherwise be a silent guess.
void parse_flags(const std::vector<std::string>& args, const std::map<std::string, Handler>& handlers) {
  std::map<std::string, std::string> seen;  // flag -> its first value
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    const bool inline_value = flag.find('=') != std::string::npos;
    if (inline_value) {
      value = flag.substr(flag.find('=') + 1);
      flag = flag.substr(0, flag.find('='));
    }
    const auto h = handlers.find(flag);
    if (flag.rfind("--", 0) != 0 || h == handlers.end())
      throw UsageError("unknown option '" + args[i] + "'");  // main() adds the pointer to --help
    if (!inline_value) {
      if (i + 1 >= args.size()) throw UsageError(flag + ": missing value");
      // A known flag in the value's place: this flag's value was left out (its own value would otherwise be
      // blamed as an unknown option). A value that starts with "--" can still be given as --flag=value.
      const std::string& next = args[i + 1];
      if (handlers.count(next.substr(0, next.find('=')))) {
        throw UsageError(flag + ": missing value (got the option '" + next + "' in its place)");
      }
      value = args[++i];
    }
    if (const auto first = seen.find(flag); first != seen.end())
      throw UsageError(flag + ": given more than once ('" + first->second + "', then '" + value + "')");
    seen[flag] = value;
    h->second(value);
  }
}

}  // namespace

void check_writable_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) throw UsageError("--json: empty path");
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError("--json: '" + path + "' is a directory, not a file path");
  fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec)) {
    const bool exists = fs::exists(parent, ec);
    throw UsageError("--json: cannot write '" + path + "': " +
                     (exists ? "'" + parent.string() + "' is not a folder"
                             : "folder '" + parent.string() + "' does not exist"));
  }
  if (::access(parent.c_str(), W_OK) != 0)
    throw UsageError("--json: cannot write '" + path + "': folder '" + parent.string() + "' is not writable");
  // Opened for appending (nothing is truncated or written): access() would let root through on files that
  // refuse writes anyway, such as those of /proc.
  if (fs::exists(path, ec)) {
    if (!std::ofstream(path, std::ios::app))
      throw UsageError("--json: cannot write '" + path + "': file is not writable");
  } else {
    // Created and removed again: a folder that refuses new files (such as /proc) lets root's access() pass.
    // O_EXCL creates nothing where a name already is (a dangling link, a file made since the check), and
    // what it did not create is never removed.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::close(fd);
      ::unlink(path.c_str());
    } else if (errno != EEXIST) {
      throw UsageError("--json: cannot write '" + path + "': cannot create the file (" + std::strerror(errno) + ")");
    }
  }
}

RunOptions parse_run_options(const std::vector<std::string>& args) {
  RunOptions o;
  parse_flags(args, {
      {"--model", [&](const std::string& v) { o.model = v; }},
      {"--tokens", [&](const std::string& v) { o.tokens = parse_int("--tokens", v, 1); }},
      {"--routing", [&](const std::string& v) { o.routing = parse_routing(v); }},
      {"--seed", [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v, 0)); }},
      {"--json",
       [&](const std::string& v) {
         if (v == "-") throw UsageError("--json: run prints its table on standard output; give a file path, not '-'");
         check_writable_path(v);
         o.json = v;
       }},
      {"--workloads", [&](const std::string& v) { o.workloads = v; }},
      {"--iters", [&](const std::string& v) { o.iters = parse_int32("--iters", v, 1); }},
      {"--warmup", [&](const std::string& v) { o.warmup = parse_int32("--warmup", v, 0); }},
      {"--oracle",
       [&](const std::string& v) {
         if (v == "reference") o.oracle = Oracle::reference;
         else if (v == "spot") o.oracle = Oracle::spot_check;
         else throw UsageError("--oracle: expected reference or spot, got '" + v + "'");
       }},
      {"--backend",
       [&](const std::string& v) {
         if (v == "auto") o.backend = BackendChoice::automatic;
         else if (v == "cpu") o.backend = BackendChoice::cpu;
         else if (v == "gpu") o.backend = BackendChoice::gpu;
         else throw UsageError("--backend: expected auto, cpu or gpu, got '" + v + "'");
       }},
  });
  return o;
}

GemmOptions parse_gemm_options(const std::vector<std::string>& args) {
  GemmOptions o;
  std::string routing_given;  // as written, for the conflict's message
  parse_flags(args, {
      {"--m", [&](const std::string& v) { o.m = parse_int("--m", v, 1); }},
      {"--n", [&](const std::string& v) { o.n = parse_int("--n", v, 1); }},
      {"--k", [&](const std::string& v) { o.k = parse_int("--k", v, 1); }},
      {"--e", [&](const std::string& v) { o.e = parse_int("--e", v, 1, kMaxExperts); }},  // the ops' limit
      {"--group-sizes",
       [&](const std::string& v) {
         o.group_sizes.clear();
         size_t start = 0;
         while (start <= v.size()) {
           const size_t comma = std::min(v.find(',', start), v.size());
           o.group_sizes.push_back(parse_int("--group-sizes", v.substr(start, comma - start), 0));
           start = comma + 1;
         }
       }},
      {"--routing",
       [&](const std::string& v) {
         o.routing = parse_routing(v);
         routing_given = v;
       }},
      {"--seed", [&](const std::string& v) { o.seed = static_cast<uint64_t>(parse_int("--seed", v, 0)); }},
      {"--layout",
       [&](const std::string& v) {
         if (v == "kn") o.layout = BLayout::kn;
         else if (v == "nk") o.layout = BLayout::nk;
         else throw UsageError("--layout: expected kn or nk, got '" + v + "'");
       }},
      {"--iters", [&](const std::string& v) { o.iters = parse_int32("--iters", v, 1); }},
      {"--warmup", [&](const std::string& v) { o.warmup = parse_int32("--warmup", v, 0); }},
      {"--json", [&](const std::string& v) { if (v != "-") check_writable_path(v); o.json = v; }},
  });
  if (o.m == 0 || o.n == 0 || o.k == 0 || o.e == 0) {
    std::string missing;
    const std::pair<const char*, int64_t> required[] = {{"--m", o.m}, {"--n", o.n}, {"--k", o.k}, {"--e", o.e}};
    for (const auto& [flag, value] : required) {
      if (value == 0) missing += (missing.empty() ? "" : ", ") + std::string(flag);
    }
    throw UsageError("gemm: --m, --n, --k and --e are required; missing: " + missing);
  }
  if (o.m > std::numeric_limits<int32_t>::max())
    throw UsageError("--m: " + std::to_string(o.m) + " rows exceed the 2147483647 that int32 expert offsets address");
  if (!o.group_sizes.empty() && !routing_given.empty())
    throw UsageError("--routing: '" + routing_given + "' not used with --group-sizes, which gives the sizes itself");
  if (!o.group_sizes.empty()) {
    if (static_cast<int64_t>(o.group_sizes.size()) != o.e)
      throw UsageError("--group-sizes: expected " + std::to_string(o.e) + " sizes (--e), got " +
                       std::to_string(o.group_sizes.size()));
    // Summed against --m one size at a time, so that no sum of huge sizes can wrap around.
    int64_t total = 0;
    for (size_t i = 0; i < o.group_sizes.size(); ++i) {
      if (o.group_sizes[i] > o.m - total)
        throw UsageError(i == 0 ? "--group-sizes: size 1 is " + std::to_string(o.group_sizes[0]) + ", past --m " +
                                      std::to_string(o.m)
                                : "--group-sizes: the first " + std::to_string(i + 1) + " sizes sum past --m " +
                                      std::to_string(o.m) + " (size " + std::to_string(i + 1) + " is " +
                                      std::to_string(o.group_sizes[i]) + ")");
      total += o.group_sizes[i];
    }
  }
  return o;
}

}  // namespace moegemm::cli
