// Private: the benchmarks' command-line values that are config enums (`--device cuda`,
// `--modes bf16,bf16_sr`, `--decode auto,dynamic`), read by their config names.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "unstuck/common/error.h"

namespace unstuck::bench {

// The value of an enum by its config name; UserError naming the option otherwise.
template <class E>
E enum_of(const std::string& name, const char* option) {
  std::string names;
  for (const auto& [v, n] : enum_names(E{})) {
    if (name == n) return v;
    names += std::string(names.empty() ? "" : ", ") + n;
  }
  throw UserError(std::string(option) + ": unknown '" + name + "' (expected one of " + names + ")");
}

// A comma-separated list of config names, in order (empty for an empty list).
template <class E>
std::vector<E> enum_list(const std::string& list, const char* option) {
  std::vector<E> out;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) out.push_back(enum_of<E>(name, option));
  return out;
}

}  // namespace unstuck::bench
