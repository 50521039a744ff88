#include "workloads.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "default_workloads.hpp"
#include "moegemm/ops.hpp"
#include "usage_error.hpp"

namespace moegemm::cli {
namespace {

int64_t positive_field(const nlohmann::ordered_json& obj, const char* key, const std::string& where) {
  constexpr uint64_t kMax = std::numeric_limits<int64_t>::max();
  // nlohmann keeps integers past int64 (up to 2^64 - 1) unsigned; read as int64 they would wrap to <= 0.
  if (obj.contains(key) && obj[key].is_number_unsigned() && obj[key].get<uint64_t>() > kMax) {
    throw UsageError(where + ": field \"" + key + "\" must be at most " + std::to_string(kMax) + ", got " +
                     std::to_string(obj[key].get<uint64_t>()));
  }
  if (!obj.contains(key) || !obj[key].is_number_integer() || obj[key].get<int64_t>() <= 0)
    throw UsageError(where + ": field \"" + key + "\" must be a positive integer");
  return obj[key].get<int64_t>();
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

Workloads parse(const std::string& text, const std::string& source) {
  nlohmann::ordered_json doc;
  try {
    doc = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw UsageError("workloads file " + source + " is not valid JSON: " + e.what());
  } catch (const nlohmann::json::exception& e) {  // valid JSON past the parser's limits (a number beyond double)
    throw UsageError("workloads file " + source + " cannot be parsed: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("models") || !doc["models"].is_object())
    throw UsageError("workloads file " + source + " has no \"models\" object");
  Workloads w;
  w.source = source;
  for (const auto& [name, m] : doc["models"].items()) {
    const std::string where = source + ": model " + name;
    w.models.push_back({name, positive_field(m, "tokens", where), positive_field(m, "top_k", where),
                        experts_field(m, "experts", where), positive_field(m, "hidden", where),
                        positive_field(m, "intermediate", where)});
  }
  if (doc.contains("gemms") && doc["gemms"].is_array()) {
    for (const auto& g : doc["gemms"]) {
      const std::string name = g.value("name", std::string("unnamed"));
      const std::string where = source + ": gemm " + name;
      w.gemms.push_back({name, positive_field(g, "M", where), positive_field(g, "N", where),
                         positive_field(g, "K", where), experts_field(g, "E", where)});
    }
  }
  return w;
}

}  // namespace

Workloads embedded_workloads() { return parse(kDefaultWorkloadsJson, "embedded"); }

Workloads load_workloads(const std::string& path) {
  std::error_code ec;  // a folder opens as a stream that reads nothing on some systems
  if (std::filesystem::is_directory(path, ec)) {
    throw UsageError("--workloads: '" + path + "' is a directory, not a workloads file");
  }
  std::ifstream in(path);
  if (!in) throw UsageError("--workloads: cannot read workloads file " + path);
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw UsageError("--workloads: cannot read workloads file " + path);
  return parse(text.str(), path);
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
