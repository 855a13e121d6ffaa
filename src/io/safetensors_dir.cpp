// Single-file and sharded safetensors weights of a model directory (read memory-mapped, written
// with transformers' shard naming and index format).
#include "unstuck/io/safetensors_dir.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"

namespace unstuck::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string shard_name(std::size_t index, std::size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index, count);
  return buf;
}

bool is_shard_name(const std::string& name) {
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return std::regex_match(name, shard);
}

}  // namespace

SafetensorsDir::SafetensorsDir(const fs::path& dir) {
  const fs::path index_path = dir / kWeightsIndexFile;
  if (!fs::exists(index_path)) {
    source_ = (dir / kWeightsFile).string();
    if (!fs::exists(dir / kWeightsFile))
      throw UserError("model directory '" + dir.string() + "' has neither " + kWeightsFile + " nor " +
                      kWeightsIndexFile);
    files_.push_back(std::make_unique<MappedSafetensors>(dir / kWeightsFile));
    for (const TensorView& t : files_[0]->tensors()) tensors_[t.name] = {&t, files_[0].get()};
    return;
  }
  source_ = index_path.string();
  const json index = read_json_file(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw UserError(source_ + ": expected an object with a \"weight_map\" object");
  std::map<std::string, MappedSafetensors*> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string())
      throw UserError(source_ + ": weight_map." + name + " must be a file name, got " + file.dump());
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f.find('\\') != std::string::npos || f == "." || f == "..")
      throw UserError(source_ + ": weight_map." + name + " names '" + f + "', not a file in the model directory");
    if (!by_file.count(f)) {
      files_.push_back(std::make_unique<MappedSafetensors>(dir / f));
      by_file[f] = files_.back().get();
    }
    const TensorView* t = by_file[f]->find(name);
    if (!t) throw UserError(source_ + ": weight_map." + name + " names " + f + ", which has no such tensor");
    tensors_[name] = {t, by_file[f]};
  }
  for (const auto& file : files_)
    for (const TensorView& t : file->tensors())
      if (!tensors_.count(t.name) || tensors_[t.name].second != file.get())
        throw UserError(source_ + ": tensor '" + t.name + "' in " + file->path() + " is not listed in weight_map");
}

const TensorView* SafetensorsDir::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.first;
}

const std::string& SafetensorsDir::file_of(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? source_ : it->second.second->path();
}

uint64_t SafetensorsDir::file_offset(const std::string& name) const {
  const auto& [tensor, file] = tensors_.at(name);
  return file->file_offset(*tensor);
}

std::vector<std::string> SafetensorsDir::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : tensors_) out.push_back(name);
  return out;
}

void write_safetensors_dir(const fs::path& dir, std::vector<TensorView> tensors, uint64_t max_shard_bytes,
                           const std::map<std::string, std::string>& metadata, const TensorFill& fill) {
  fs::create_directories(dir);
  std::sort(tensors.begin(), tensors.end(), [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  uint64_t total = 0;
  for (const TensorView& t : tensors) total += t.nbytes;
  // Remove weights of the other form (and stale shards) first.
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == kWeightsFile || name == kWeightsIndexFile || is_shard_name(name)) stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) fs::remove(p);
  if (max_shard_bytes == 0 || total <= max_shard_bytes) {
    write_safetensors(dir / kWeightsFile, tensors, metadata, fill);
    return;
  }
  std::vector<std::vector<TensorView>> shards(1);
  uint64_t in_shard = 0;
  for (const TensorView& t : tensors) {
    if (!shards.back().empty() && in_shard + t.nbytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(t);
    in_shard += t.nbytes;
  }
  json weight_map = json::object();
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i + 1, shards.size());
    write_safetensors(dir / name, shards[i], metadata, fill);
    for (const TensorView& t : shards[i]) weight_map[t.name] = name;
  }
  write_json_file(dir / kWeightsIndexFile, {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
}

uint64_t parse_byte_size(const std::string& text, const std::string& what) {
  static const std::regex size(R"(\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)(i?)B?\s*)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, size))
    throw UserError(what + ": expected a size like 2GB, 500MB or 1GiB, got '" + text + "'");
  const double value = std::stod(m[1].str());
  const char unit = char(std::toupper(m[2].str().empty() ? ' ' : m[2].str()[0]));
  const double base = m[3].str().empty() ? 1000.0 : 1024.0;
  int power = unit == 'K' ? 1 : unit == 'M' ? 2 : unit == 'G' ? 3 : unit == 'T' ? 4 : 0;
  const double bytes = value * std::pow(base, power);
  if (!(bytes >= 1) || bytes > 1e18) throw UserError(what + ": size '" + text + "' is out of range");
  return uint64_t(bytes);
}

}  // namespace unstuck::io
