// How option values read as text, for every component that declares options: an enum's config name,
// a real number as configs print it, and a free mapping kept as JSON text. config/config.h binds
// options to YAML with these; the components below it (data, reward, tokenizer, dist) name their
// values with them without depending on the config layer.
#pragma once

#include <string>

namespace unstuck {

// A config value that is a free mapping of names to YAML values, passed on unread (a user function's
// keyword arguments). Kept as JSON text: an object; YAML scalars become JSON as YAML 1.2's core schema
// reads them (null, true/false, integers, floats), quoted scalars and everything else strings.
struct Mapping {
  std::string json = "{}";
  bool empty() const { return json == "{}"; }
};

// x as configs print it: the shortest text that reads back to the same double, always visibly real
// ("1.0", "0.1", "1e-05"); .nan, .inf and -.inf for the others (YAML's spellings).
std::string format_double(double x);

// A config enum E declares, in its own namespace, a constexpr table of {value, name} pairs and
// `constexpr const auto& enum_names(E) { return kTable; }`, found by argument-dependent lookup.
template <class E>
const char* enum_name(E value) {
  for (const auto& [v, name] : enum_names(E{})) {
    if (v == value) return name;
  }
  return "?";
}

}  // namespace unstuck
