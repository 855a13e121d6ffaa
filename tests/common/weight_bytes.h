// Test helper: every tensor's bytes of a model directory (its safetensors files), to compare two
// exports or an export with a run's final model bit for bit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "unstuck/io/safetensors_dir.h"

namespace unstuck::testing {

inline std::map<std::string, std::vector<uint8_t>> weight_bytes(const std::filesystem::path& dir) {
  const io::SafetensorsDir w(dir);
  std::map<std::string, std::vector<uint8_t>> out;
  for (const std::string& name : w.names()) {
    const io::TensorView* t = w.find(name);
    const auto* p = static_cast<const uint8_t*>(t->data);
    out[name].assign(p, p + t->nbytes);
  }
  return out;
}

}  // namespace unstuck::testing
