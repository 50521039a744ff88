#include "workloads.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "default_workloads.hpp"
#include "moegemm/ops.hpp"
#include "usage_error.hpp"

namespace moegemm::cli {
namespace {

/// `text` with every byte outside printable ASCII written as \xHH: the parser's messages quote the bytes it
/// last read, which in a file that is not UTF-8 text would reach the terminal raw.
std::string escaped_bytes(const std::string& text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return out;
}

int64_t positive_field(const nlohmann::ordered_json& obj, const char* key, const std::string& where) {
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  // nlohmann keeps integers past int64 (up to 2^64 - 1) unsigned; read as int64 they would wrap to <= 0.
  if (obj.contains(key) && obj[key].is_number_unsigned() && obj[key].get<uint64_t>() > kMax) {
    throw UsageError(where + ": field \"" + key + "\" must be at most " + std::to_string(kMax) + ", got " +
                     std::to_string(obj[key].get<uint64_t>()));
  }
  // Past 2^64 - 1 nlohmann reads an integer literal as a double: named with the limit too, not as a fraction.
  if (obj.contains(key) && obj[key].is_number_float() && obj[key].get<double>() >= 0x1p63) {
    throw UsageError(where + ": field \"" + key + "\" must be at most " + std::to_string(kMax) + ", got " +
                     obj[key].dump());
  }
  if (!obj.contains(key)) throw UsageError(where + ": field \"" + key + "\" is missing (a positive integer)");
  if (!obj[key].is_number_integer() || obj[key].get<int64_t>() <= 0) {
    std::string given = obj[key].dump();
    if (given.size() > 40) given = given.substr(0, 37) + "...";
    throw UsageError(where + ": field \"" + key + "\" must be a positive integer, got " + escaped_bytes(given));
  }
  return obj[key].get<int64_t>();
}

/// A row length of a bf16 operand (a GEMM's K or N): a multiple of 8, the ops' rule of 16-byte rows, which the
/// ops would otherwise enforce only once a run had started.
int64_t row_length_field(const nlohmann::ordered_json& obj, const char* key, const std::string& where) {
  const int64_t v = positive_field(obj, key, where);
  if (v % 8 != 0) {
    throw UsageError(where + ": field \"" + key + "\" must be a multiple of 8 (bf16 rows of 16-byte multiples), got " +
                     std::to_string(v));
  }
  return v;
}

/// An expert count: positive and at most the ops' limit (kMaxExperts), which every op would reject past.
int64_t experts_field(const nlohmann::ordered_json& obj, const char* key, const std::string& where) {
  const int64_t e = positive_field(obj, key, where);
  if (e > kMaxExperts) {
    throw UsageError(where + ": field \"" + key + "\" must be at most " + std::to_string(kMaxExperts) +
                     " (the ops' limit on experts), got " + std::to_string(e));
  }
  return e;
}

/// How deep a workloads file's objects and arrays may nest.
constexpr std::size_t kMaxWorkloadsDepth = 32;
// The largest workloads file read (bytes); the embedded one is about 2 KB.
constexpr std::size_t kMaxWorkloadsBytes = std::size_t{16} << 20;

/// The document, refusing a key that appears twice in one object (nlohmann would keep one of the two silently)
/// and nesting deeper than kMaxWorkloadsDepth.
nlohmann::ordered_json parse_without_duplicate_keys(const std::string& text, const std::string& source) {
  struct Container {
    std::string name;  // for the message: the top-level object, object "key", "key" (an array), an entry of "key"
    bool array;
    std::set<std::string> keys;
  };
  std::vector<Container> open;
  std::string last_key;
  auto refuse_duplicates = [&](int, nlohmann::ordered_json::parse_event_t event, nlohmann::ordered_json& parsed) {
    using Event = nlohmann::ordered_json::parse_event_t;
    const auto child_name = [&](bool array) {
      if (open.empty()) return std::string(array ? "the top-level array" : "the top-level object");
      if (open.back().array) return "an entry of " + open.back().name;
      return (array ? "\"" : "object \"") + last_key + "\"";
    };
    if (event == Event::object_start || event == Event::array_start) {
      // The schema nests 3 deep. A deeper file is refused at once: the parser and the container names above
      // would otherwise take memory that grows with the depth (quadratically for nested arrays' names).
      if (open.size() >= kMaxWorkloadsDepth) {
        throw UsageError("workloads file " + source + ": nested deeper than " + std::to_string(kMaxWorkloadsDepth) +
                         " levels (its schema nests 3)");
      }
      const bool array = event == Event::array_start;
      open.push_back({child_name(array), array, {}});
    } else if (event == Event::object_end || event == Event::array_end) {
      open.pop_back();
    } else if (event == Event::key) {
      last_key = parsed.get<std::string>();
      if (!open.back().keys.insert(last_key).second) {
        throw UsageError("workloads file " + source + ": key \"" + last_key + "\" appears twice in " +
                         open.back().name);
      }
    }
    return true;
  };
  // The parser stops at a NUL byte and would take the text before it for the whole document.
  if (const std::size_t nul = text.find('\0'); nul != std::string::npos) {
    throw UsageError("workloads file " + source + " is not valid JSON: a NUL byte at offset " + std::to_string(nul));
  }
  try {
    return nlohmann::ordered_json::parse(text, refuse_duplicates);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError("workloads file " + source + " is not valid JSON: " + escaped_bytes(e.what()));
  } catch (const nlohmann::json::exception& e) {  // valid JSON past the parser's limits (a number beyond double)
    throw UsageError("workloads file " + source + " cannot be parsed: " + escaped_bytes(e.what()));
  }
}

/// Refuses an entry that is not an object or has a field outside `known` (a misspelt or unsupported field
/// would otherwise be ignored).
void check_fields(const nlohmann::ordered_json& entry, const std::vector<std::string>& known,
                  const std::string& where) {
  if (!entry.is_object()) throw UsageError(where + ": expected an object, got " + entry.dump());
  std::string list;
  for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
  for (const auto& [key, value] : entry.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end())
      throw UsageError(where + ": unknown field \"" + key + "\" (known: " + list + ")");
  }
}

Workloads parse(const std::string& text, const std::string& source) {
  const nlohmann::ordered_json doc = parse_without_duplicate_keys(text, source);
  if (!doc.is_object() || !doc.contains("models"))
    throw UsageError("workloads file " + source + " has no \"models\" object");
  if (!doc["models"].is_object())
    throw UsageError("workloads file " + source + ": \"models\" must be an object of named models, got " +
                     std::string(doc["models"].type_name()));
  Workloads w;
  w.source = source;
  for (const auto& [name, m] : doc["models"].items()) {
    // A blank name could not be told apart in a report, nor passed to --model without quoting.
    if (name.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
      throw UsageError("workloads file " + source + ": a model with an empty or blank name");
    const std::string where = source + ": model " + name;
    check_fields(m, {"tokens", "top_k", "experts", "hidden", "intermediate"}, where);
    ModelPreset preset{name, positive_field(m, "tokens", where), positive_field(m, "top_k", where),
                       experts_field(m, "experts", where), row_length_field(m, "hidden", where),
                       row_length_field(m, "intermediate", where)};
    // Each token is routed to top_k distinct experts.
    if (preset.top_k > preset.experts) {
      throw UsageError(where + ": field \"top_k\" must be at most \"experts\" = " + std::to_string(preset.experts) +
                       " (a token goes to top_k distinct experts), got " + std::to_string(preset.top_k));
    }
    check_rows(preset.tokens, preset.top_k, where);
    check_layer_elements(preset, where);
    w.models.push_back(preset);
  }
  if (doc.contains("gemms")) {
    if (!doc["gemms"].is_array())
      throw UsageError("workloads file " + source + ": \"gemms\" must be an array, got " + doc["gemms"].dump());
    std::size_t index = 0;
    for (const auto& g : doc["gemms"]) {
      std::string where = source + ": gemm " + std::to_string(index++);
      check_fields(g, {"name", "M", "N", "K", "E"}, where);
      std::string name = "unnamed";
      if (g.contains("name")) {
        if (!g["name"].is_string()) throw UsageError(where + ": field \"name\" must be a string");
        name = g["name"].get<std::string>();
        where = source + ": gemm " + name;
      }
      w.gemms.push_back({name, positive_field(g, "M", where), row_length_field(g, "N", where),
                         row_length_field(g, "K", where), experts_field(g, "E", where)});
    }
  }
  return w;
}

}  // namespace

void check_rows(int64_t tokens, int64_t top_k, const std::string& who, const std::string& detail) {
  if (tokens > std::numeric_limits<int32_t>::max() / top_k) {
    throw UsageError(who + ": " + std::to_string(tokens) + " tokens x top_k " + std::to_string(top_k) + detail +
                     " exceed the 2147483647 rows that int32 expert offsets address");
  }
}

void check_layer_elements(const ModelPreset& layer, const std::string& who) {
  constexpr int64_t kMaxElements = int64_t{1} << 60;
  const auto too_large = [&](const std::string& what) {
    return UsageError(who + ": " + what +
                      " elements exceed 2^60, past what 64-bit byte counts of the layer's buffers hold");
  };
  if (layer.intermediate > std::numeric_limits<int64_t>::max() / 2) {
    throw too_large("2 intermediate (2 x " + std::to_string(layer.intermediate) + ")");
  }
  const int64_t rows = layer.rows(), two_i = 2 * layer.intermediate;  // rows: checked by check_rows
  const struct {
    const char* what;
    int64_t a, b, c;
  } tensors[] = {{"tokens x top_k x hidden", rows, layer.hidden, 1},
                 {"tokens x top_k x 2 intermediate", rows, two_i, 1},
                 {"experts x 2 intermediate x hidden", layer.experts, two_i, layer.hidden}};
  for (const auto& t : tensors) {
    int64_t elems = 0;
    if (__builtin_mul_overflow(t.a, t.b, &elems) || __builtin_mul_overflow(elems, t.c, &elems) ||
        elems > kMaxElements) {
      throw too_large(std::string(t.what) + " (" + std::to_string(t.a) + " x " + std::to_string(t.b) +
                      (t.c == 1 ? "" : " x " + std::to_string(t.c)) + ")");
    }
  }
}

Workloads embedded_workloads() { return parse(kDefaultWorkloadsJson, "embedded"); }

Workloads load_workloads(const std::string& path) {
  if (path.empty()) throw UsageError("--workloads: empty path");
  std::error_code ec;  // a folder opens as a stream that reads nothing on some systems
  if (std::filesystem::is_directory(path, ec)) {
    throw UsageError("--workloads: '" + path + "' is a directory, not a workloads file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError("--workloads: cannot read workloads file " + path);
  // Read in blocks up to a cap: a workloads file is a few KB of JSON, and an endless stream (/dev/zero, a
  // pipe that never closes) would otherwise fill the memory before the parser saw a byte.
  std::string text;
  std::array<char, 1 << 16> block;
  while (in.read(block.data(), block.size()) || in.gcount() > 0) {
    text.append(block.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxWorkloadsBytes) {
      throw UsageError("--workloads: workloads file " + path + " is larger than " +
                       std::to_string(kMaxWorkloadsBytes >> 20) + " MiB (a workloads file is a small JSON document)");
    }
  }
  if (in.bad()) throw UsageError("--workloads: cannot read workloads file " + path);
  return parse(text, path);
}

const ModelPreset& find_model(const Workloads& w, const std::string& name) {
  std::string known;
  for (const auto& m : w.models) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  if (known.empty()) throw UsageError("--model: unknown model '" + name + "' (the workloads file has no models)");
  throw UsageError("--model: unknown model '" + name + "' (known: " + known + ")");
}

}  // namespace moegemm::cli
