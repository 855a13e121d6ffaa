// Checkpoint files: state.safetensors (master, exp_avg, exp_avg_sq), rng.bin (libtorch generator
// state), trainer.json (counters, scaler, data order), config.yaml (the run config) and
// manifest.json (size and FNV-1a 64 of each file), written in a temporary directory that is renamed
// into place once complete.
#include "unstuck/train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw UserError("checkpoint: cannot read '" + p.string() + "'");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string fnv1a64(const std::string& bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

void fsync_path(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// step_N directories under `root` that hold a manifest (complete), oldest first (the zero-padded
// step makes name order step order).
std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<fs::path> all;
  if (!fs::is_directory(root)) return all;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().rfind("step_", 0) == 0 &&
        e.path().extension() != ".tmp" && fs::exists(e.path() / "manifest.json"))
      all.push_back(e.path());
  std::sort(all.begin(), all.end());
  return all;
}

const char* kFiles[] = {"state.safetensors", "rng.bin", "trainer.json", "config.yaml"};

}  // namespace

fs::path save_checkpoint(const fs::path& root, const TrainerState& s, int keep) {
  for (const torch::Tensor* t : {&s.master, &s.exp_avg, &s.exp_avg_sq})
    if (!torch::isfinite(*t).all().item<bool>())
      throw UserError("checkpoint at step " + std::to_string(s.step) +
                      " not written: the optimizer state holds NaN/Inf values");
  fs::create_directories(root);
  const fs::path final_dir = root / step_name(s.step);
  const fs::path tmp = root / (step_name(s.step) + ".tmp");
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  const auto view = [](const char* name, const torch::Tensor& t) {
    return io::TensorView{name, io::DType::f32, {t.numel()}, t.data_ptr(), std::size_t(t.numel()) * 4};
  };
  io::write_safetensors(tmp / "state.safetensors",
                        {view("master", s.master), view("exp_avg", s.exp_avg), view("exp_avg_sq", s.exp_avg_sq)});
  {
    std::ofstream out(tmp / "rng.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(s.sampling_rng.data()), std::streamsize(s.sampling_rng.size()));
  }
  nlohmann::json j{{"step", s.step},
                   {"optimizer_steps", s.optimizer_steps},
                   {"skipped_steps", s.skipped_steps},
                   {"scaler", {{"scale", s.scaler.scale}, {"growth_tracker", s.scaler.growth_tracker},
                               {"hysteresis_tracker", s.scaler.hysteresis_tracker},
                               {"skipped_steps", s.scaler.skipped_steps}}},
                   {"data_rng", s.data_rng},
                   {"order", s.order},
                   {"cursor", s.cursor}};
  io::write_json_file(tmp / "trainer.json", j, -1);
  {
    std::ofstream cfg(tmp / "config.yaml");
    cfg << s.config_yaml;
  }
  nlohmann::json manifest = nlohmann::json::object();
  for (const char* f : kFiles) {
    fsync_path(tmp / f);
    const std::string bytes = read_bytes(tmp / f);
    manifest[f] = {{"bytes", bytes.size()}, {"fnv1a64", fnv1a64(bytes)}};
  }
  io::write_json_file(tmp / "manifest.json", manifest);  // last: its presence marks completeness
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(root);
  // Keep the newest `keep` complete checkpoints.
  const std::vector<fs::path> all = complete_checkpoints(root);
  for (std::size_t i = 0; keep > 0 && i + std::size_t(keep) < all.size(); ++i) fs::remove_all(all[i]);
  return final_dir;
}

fs::path latest_checkpoint(const fs::path& root) {
  const std::vector<fs::path> all = complete_checkpoints(root);
  return all.empty() ? fs::path() : all.back();
}

TrainerState load_checkpoint(const fs::path& dir) {
  const nlohmann::json manifest = io::read_json_file(dir / "manifest.json");
  for (const char* f : kFiles) {
    const fs::path p = dir / f;
    if (!manifest.contains(f)) throw UserError("checkpoint " + dir.string() + ": manifest.json lacks " + f);
    if (!fs::exists(p)) throw UserError("checkpoint file '" + p.string() + "' is missing");
    const std::string bytes = read_bytes(p);
    if (bytes.size() != manifest[f]["bytes"].get<std::size_t>())
      throw UserError("checkpoint file '" + p.string() + "' is truncated or altered: " +
                      std::to_string(bytes.size()) + " bytes, manifest says " +
                      std::to_string(manifest[f]["bytes"].get<std::size_t>()));
    if (fnv1a64(bytes) != manifest[f]["fnv1a64"].get<std::string>())
      throw UserError("checkpoint file '" + p.string() + "' is corrupted (checksum mismatch)");
  }
  TrainerState s;
  const io::SafetensorsFile st = io::read_safetensors(dir / "state.safetensors");
  const auto tensor = [&](const char* name) {
    const io::Tensor& t = st.at(name);
    return torch::from_blob(const_cast<uint8_t*>(t.bytes.data()), {io::numel(t.shape)}, torch::kFloat32).clone();
  };
  s.master = tensor("master");
  s.exp_avg = tensor("exp_avg");
  s.exp_avg_sq = tensor("exp_avg_sq");
  const std::string rng = read_bytes(dir / "rng.bin");
  s.sampling_rng.assign(rng.begin(), rng.end());
  const nlohmann::json j = io::read_json_file(dir / "trainer.json");
  s.step = j.at("step").get<int64_t>();
  s.optimizer_steps = j.at("optimizer_steps").get<int64_t>();
  s.skipped_steps = j.at("skipped_steps").get<int64_t>();
  s.scaler.scale = j.at("scaler").at("scale").get<double>();
  s.scaler.growth_tracker = j.at("scaler").at("growth_tracker").get<int64_t>();
  s.scaler.hysteresis_tracker = j.at("scaler").at("hysteresis_tracker").get<int64_t>();
  s.scaler.skipped_steps = j.at("scaler").at("skipped_steps").get<int64_t>();
  s.data_rng = j.at("data_rng").get<std::string>();
  s.order = j.at("order").get<std::vector<int64_t>>();
  s.cursor = j.at("cursor").get<int64_t>();
  s.config_yaml = read_bytes(dir / "config.yaml");
  return s;
}

}  // namespace unstuck::train
