// The weights of a Hugging Face model directory: one model.safetensors, or shards
// (model-0000i-of-0000N.safetensors) listed in model.safetensors.index.json. Read memory-mapped;
// written as one file or as shards of a maximum size, with the index transformers expects.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "unstuck/io/safetensors.h"

namespace unstuck::io {

inline constexpr const char* kWeightsFile = "model.safetensors";
inline constexpr const char* kWeightsIndexFile = "model.safetensors.index.json";

class SafetensorsDir {
 public:
  // Opens dir's index (when present) or model.safetensors. Throws UserError naming the file for a
  // missing file, a malformed index (a weight_map entry naming a missing file or a tensor its
  // shard lacks, a shard tensor the index does not list, a path outside dir), or a bad shard.
  explicit SafetensorsDir(const std::filesystem::path& dir);

  const std::string& source() const { return source_; }       // the index or the single file
  const TensorView* find(const std::string& name) const;      // nullptr when absent
  const std::string& file_of(const std::string& name) const;  // the shard holding `name`
  // Byte offset of `name`'s data in file_of(name) (`name` must exist).
  uint64_t file_offset(const std::string& name) const;
  std::vector<std::string> names() const;  // every tensor, sorted

 private:
  std::string source_;
  std::vector<std::unique_ptr<MappedSafetensors>> files_;
  std::map<std::string, std::pair<const TensorView*, const MappedSafetensors*>> tensors_;
};

// Writes `tensors` into dir: model.safetensors when their bytes fit in `max_shard_bytes` (0 = no
// limit), else model-0000i-of-0000N.safetensors shards of at most that size (a larger tensor gets
// a shard of its own) plus model.safetensors.index.json. Weight files of the other form already in
// dir are removed so the directory is unambiguous. Tensors without `data` are filled by `fill`, a
// bounded block at a time (write_safetensors).
void write_safetensors_dir(const std::filesystem::path& dir, std::vector<TensorView> tensors, uint64_t max_shard_bytes,
                           const std::map<std::string, std::string>& metadata = {}, const TensorFill& fill = {});

// "2GB", "500MB", "1.5GiB", "1000" (bytes) -> bytes; throws UserError naming `what` otherwise.
uint64_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace unstuck::io
