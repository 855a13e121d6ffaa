// libFuzzer target: a whole checkpoint directory through the real loader (load_checkpoint,
// check_checkpoint_fits) and what a resume and an export then do with the state (data order,
// sampling generator, loss scaler, the embedded run config). Needs libtorch: built by scripts/fuzz.sh
// with UNSTUCK_FUZZ_TORCH (our code instrumented, the prebuilt libtorch as it is).
//
// Input: sections "\n@@unstuck-file:<name>\n<bytes>" (bytes up to the next marker). Names are the
// checkpoint's files (state.safetensors, rng.bin, trainer.json, config.yaml, manifest.json) and
// "fits" ("<model parameters> <training records>", the sizes the run expects; default: the state's
// own). Without a manifest.json section the target writes a manifest whose sizes and checksums match
// the files, so mutations reach the contents checks (a tampered or buggy writer). Seeds:
// tests/fuzz/corpus/fuzz_checkpoint (tests/fuzz/pack_checkpoint.py packs a real checkpoint).
// Every input must load, or fail with a UserError; any other exception or signal is a finding.
// UNSTUCK_FUZZ_VERBOSE=1 prints each input's outcome (e.g. `fuzz_checkpoint corpus/*`).
#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/config/run_config.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/param_layout.h"
#include "unstuck/precision/loss_scaler.h"
#include "unstuck/train/checkpoint.h"
#include "train/record_order.h"

namespace {

namespace fs = std::filesystem;
using namespace unstuck;

const std::string kMarker = "\n@@unstuck-file:";
const char* kFiles[] = {"state.safetensors", "rng.bin", "trainer.json", "config.yaml"};

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_checkpoint: %s\n", what.c_str());
  std::abort();
}

std::map<std::string, std::string> sections(const std::string& input) {
  std::map<std::string, std::string> out;
  std::size_t at = input.find(kMarker);
  while (at != std::string::npos) {
    const std::size_t name_begin = at + kMarker.size();
    const std::size_t name_end = input.find('\n', name_begin);
    if (name_end == std::string::npos) break;
    const std::size_t next = input.find(kMarker, name_end);
    out[input.substr(name_begin, name_end - name_begin)] =
        input.substr(name_end + 1, (next == std::string::npos ? input.size() : next) - name_end - 1);
    at = next;
  }
  return out;
}

// Writes the sections as a checkpoint directory; returns the "fits" text.
std::string write_checkpoint(const fs::path& dir, const std::map<std::string, std::string>& files) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::json manifest = nlohmann::json::object();
  for (const char* f : kFiles) {
    const auto it = files.find(f);
    if (it == files.end()) continue;  // a missing file
    std::ofstream(dir / f, std::ios::binary) << it->second;
    manifest[f] = {{"bytes", it->second.size()}, {"fnv1a64", train::checkpoint_checksum(it->second)}};
  }
  const auto raw = files.find("manifest.json");
  std::ofstream(dir / "manifest.json", std::ios::binary) << (raw != files.end() ? raw->second : manifest.dump(2));
  const auto fits = files.find("fits");
  return fits == files.end() ? std::string() : fits->second;
}

// What `unstuck train --resume` does with a loaded state before training continues.
void resume(const train::TrainerState& s, int64_t params, int64_t records, const fs::path& dir) {
  train::check_checkpoint_fits(s, params, std::size_t(records), dir);
  train::RecordOrder order(std::size_t(records), 1);
  order.restore(s.data_rng, s.order, s.cursor, "checkpoint " + dir.string());
  for (int i = 0; i < 3 && records > 0; ++i)
    if (order.next() >= std::size_t(records)) finding("data order yields a record index out of range");
  at::Generator sampling = at::make_generator<at::CPUGeneratorImpl>(0);
  sampling.set_state(
      torch::from_blob(const_cast<uint8_t*>(s.sampling_rng.data()), {int64_t(s.sampling_rng.size())}, torch::kUInt8)
          .clone());
  (void)torch::rand({4}, sampling);
  precision::DynamicLossScaler scaler(precision::LossScaleConfig{});
  scaler.load_state(s.scaler);
  int64_t next_step = 0;
  if (__builtin_add_overflow(s.step, 1, &next_step)) finding("step + 1 overflows");
  if (s.master.numel() != params || s.exp_avg.numel() != params || s.exp_avg_sq.numel() != params)
    finding("buffers that do not fit passed check_checkpoint_fits");
}

// What `unstuck export` reads: the run config embedded in the checkpoint.
void export_config(const train::TrainerState& s, const fs::path& dir) {
  RunConfig config;
  config::load_yaml_string(config::bind(config), s.config_yaml, (dir / "config.yaml").string());
  validate(config);
  if (config.model.vocab_size > 0) (void)model::llama_layout(config.model);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const fs::path dir = fs::temp_directory_path() / ("unstuck_fuzz_ckpt_" + std::to_string(::getpid()));
  static const bool verbose = std::getenv("UNSTUCK_FUZZ_VERBOSE") != nullptr;
  const auto outcome = [](const std::string& what) {
    if (verbose) std::fprintf(stderr, "outcome: %s\n", what.c_str());
  };
  const std::string fits = write_checkpoint(dir, sections(std::string(reinterpret_cast<const char*>(data), size)));
  try {
    const train::TrainerState s = train::load_checkpoint(dir);
    int64_t params = s.master.numel(), records = int64_t(s.order.size());
    std::istringstream(fits) >> params >> records;
    if (params < 0 || records < 0 || records > (int64_t(1) << 24)) return 0;  // not sizes a run can have
    try {
      resume(s, params, records, dir);
      outcome("resumed");
    } catch (const UserError& e) {
      outcome(std::string("resume refused: ") + e.what());
    }
    export_config(s, dir);
    outcome("export config accepted");
  } catch (const UserError& e) {
    outcome(std::string("UserError: ") + e.what());
  }
  return 0;
}
