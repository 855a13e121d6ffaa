// GRPO checkpoints: everything a run needs to continue bit-exactly (FP32 master, AdamW moments,
// loss-scaler state, optimizer and rollout step, every random stream's position, the data-order
// cursor). Written atomically (temporary directory, fsync, rename) with a manifest of checksums
// written last; a truncated or altered file is detected on load and named. With several ranks each
// writes its own shard of the FP32 state (no rank gathers the whole), and any world size resumes.
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "unstuck/dist/communicator.h"
#include "unstuck/precision/loss_scaler.h"

namespace unstuck::train {

// One state file of a checkpoint: elements [begin, begin + elements) of each FP32 buffer.
struct StateShard {
  std::filesystem::path file;
  int64_t begin = 0, elements = 0;
};

struct TrainerState {
  int64_t step = 0;             // rollout batches completed
  int64_t optimizer_steps = 0;  // AdamW steps applied (keys the stochastic rounding)
  int64_t skipped_steps = 0;
  precision::LossScalerState scaler;
  std::string data_rng;               // std::mt19937_64 state (its stream text)
  std::vector<int64_t> order;         // current epoch's record order
  int64_t cursor = 0;                 // next position in `order`
  std::vector<uint8_t> sampling_rng;  // libtorch CPU generator state
  // FP32 flat buffers: to save, this rank's elements [shard_begin, shard_begin + numel) of the
  // whole; loaded, the whole (undefined when loaded deferred).
  torch::Tensor master, exp_avg, exp_avg_sq;
  int64_t shard_begin = 0;
  int64_t elements = 0;            // elements of each whole buffer (the model's, or its adapters')
  std::vector<StateShard> shards;  // where a loaded checkpoint's buffers are, in element order
  std::string config_yaml;         // the resolved run config (seeds included)
  // precision.compute as the run resolved it (native or fp32; precision.compute: auto is kept by
  // this); empty in checkpoints written before it was recorded.
  std::string compute;
  // LoRA with PiSSA: the start adapters the base's SVD gave (checkpoint_checksum of their FP32
  // bytes), with the libtorch threads and the CPU that computed them; a resume recomputes the SVD
  // and must get the same bits. Empty otherwise and in checkpoints written before it was recorded.
  std::string pissa_start;
  int64_t pissa_threads = 0;
  std::string pissa_cpu;
};

// The manifest's checksum of a file's bytes: FNV-1a 64, as 16 lowercase hex digits.
std::string checkpoint_checksum(std::string_view bytes);
// The same over a file, read a bounded block at a time; `size` receives its length.
std::string checkpoint_file_checksum(const std::filesystem::path& file, uint64_t* size = nullptr);

// What load_checkpoint() reads into memory: everything, or all but the three buffers, which stay in
// the file (validated there, read later a slice at a time by read_checkpoint_buffer()).
enum class CheckpointBuffers { load, defer };

// The collectives a save of several ranks takes, as callbacks (so this file's code needs no
// communicator): `any` is true on every rank when its argument is true on any; `all_gather_bytes`
// gathers `n` bytes of every rank, rank r's at r * n.
struct CheckpointRanks {
  int rank = 0, world = 1;
  std::function<bool(bool)> any;
  std::function<void(const void* in, void* out, std::size_t n)> all_gather_bytes;
};

// Writes <checkpoints_dir>/step_<step>/ atomically and keeps the newest `keep` checkpoints.
// With `comm` of world size W > 1 every rank calls it with its own shard of the buffers (contiguous,
// in rank order): each writes state-<rank>-of-<W>.safetensors in parallel (a rank that owns no
// element writes none), then rank 0 the rest, the manifest and the rename; the directory must be on
// a file system every rank sees. Throws UserError on every rank (and leaves earlier checkpoints
// untouched) when the state is not finite or a write fails on any rank.
std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, const TrainerState& state, int keep,
                                      const CheckpointRanks& ranks);
inline std::filesystem::path save_checkpoint(const std::filesystem::path& checkpoints_dir, const TrainerState& state,
                                             int keep, dist::Communicator* comm = nullptr) {
  CheckpointRanks ranks;
  if (comm && comm->world_size() > 1) {
    ranks.rank = comm->rank();
    ranks.world = comm->world_size();
    ranks.any = [comm](bool flag) { return comm->any(flag); };
    ranks.all_gather_bytes = [comm](const void* in, void* out, std::size_t n) {
      comm->all_gather(in, out, n, dist::DataType::u8);
    };
  }
  return save_checkpoint(checkpoints_dir, state, keep, ranks);
}

// Loads a checkpoint directory after verifying every file against its manifest, then the contents
// (exactly the three F32 buffers, their shape and element count, finite values, counters in
// [0, 2^53], integers stored as integers, the data order a permutation, both generator states
// accepted by their generators). Throws UserError naming the file that is
// missing, truncated, altered or inconsistent; reads only, so a failed resume changes nothing.
// Files are checksummed and buffers checked a bounded block at a time: memory beyond the buffers
// themselves does not grow with the model.
TrainerState load_checkpoint(const std::filesystem::path& dir, CheckpointBuffers buffers = CheckpointBuffers::load);

// Elements [begin, begin + n) of buffer `name` ("master", "exp_avg", "exp_avg_sq") of a loaded
// checkpoint, read from its state files (whatever world size wrote them) into out[0, n). Throws UserError naming the
// file when it can no longer be read as it was validated.
void read_checkpoint_buffer(const TrainerState& state, const std::string& name, int64_t begin, int64_t n, float* out);

// Throws UserError when a loaded checkpoint does not fit this run: `flat_params` elements of the
// model's flat buffer and `train_records` training records.
void check_checkpoint_fits(const TrainerState& state, int64_t flat_params, std::size_t train_records,
                           const std::filesystem::path& dir);

// The newest step_* directory under `checkpoints_dir` that has a manifest (empty path if none).
std::filesystem::path latest_checkpoint(const std::filesystem::path& checkpoints_dir);
// The checkpoint to resume from for `path` (a checkpoint directory, or a run directory's newest).
// Throws UserError when there is none.
std::filesystem::path resolve_resume_checkpoint(const std::filesystem::path& path);

}  // namespace unstuck::train
