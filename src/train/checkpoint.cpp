// Checkpoint files: state.safetensors (master, exp_avg, exp_avg_sq; with several ranks one
// state-<rank>-of-<W>.safetensors per rank, each its contiguous shard), rng.bin (libtorch generator
// state), trainer.json (counters, scaler, data order), config.yaml (the run config) and
// manifest.json (size and FNV-1a 64 of each file, the shards' element ranges), written in a
// temporary directory that is renamed into place once complete.
#include "unstuck/train/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <type_traits>
#include <nlohmann/json.hpp>
#include <sstream>

#include <fcntl.h>
#include <unistd.h>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::train {
namespace {

namespace fs = std::filesystem;

// Files are checksummed and checked this many bytes at a time.
constexpr std::size_t kReadBlock = std::size_t(16) << 20;

// FNV-1a 64 state over several blocks.
struct Fnv1a {
  uint64_t h = 0xcbf29ce484222325ull;  // offset basis
  void add(const unsigned char* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 0x100000001b3ull;
    }
  }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
  }
};

// Reads `file` in blocks, calling block(offset, bytes, n) for each; returns the total size.
template <class Fn>
uint64_t for_each_block(const fs::path& file, Fn&& block) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError("checkpoint: cannot read '" + file.string() + "'");
  std::vector<unsigned char> buf(kReadBlock);
  uint64_t offset = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0) {
      ::close(fd);
      throw UserError("checkpoint: cannot read '" + file.string() + "'");
    }
    if (got == 0) break;
    block(offset, buf.data(), std::size_t(got));
    offset += uint64_t(got);
  }
  ::close(fd);
  return offset;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw UserError("checkpoint: cannot read '" + p.string() + "'");
  return std::string(std::istreambuf_iterator<char>(in), {});
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
    if (e.is_directory() && e.path().filename().string().rfind("step_", 0) == 0 && e.path().extension() != ".tmp" &&
        fs::exists(e.path() / "manifest.json"))
      all.push_back(e.path());
  std::sort(all.begin(), all.end());
  return all;
}

// The files beside the state's: written by the lead rank.
const char* kSmallFiles[] = {"rng.bin", "trainer.json", "config.yaml"};
// The manifest's list of state files when several ranks wrote them (absent: one state.safetensors).
constexpr const char* kShardsKey = "state_shards";

}  // namespace

std::string checkpoint_checksum(std::string_view bytes) {
  Fnv1a h;
  h.add(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  return h.hex();
}

std::string checkpoint_file_checksum(const fs::path& file, uint64_t* size) {
  Fnv1a h;
  const uint64_t n = for_each_block(file, [&](uint64_t, const unsigned char* p, std::size_t len) { h.add(p, len); });
  if (size) *size = n;
  return h.hex();
}

namespace {

// What a rank wrote of the state, as the lead rank lists it in the manifest.
struct ShardRecord {
  int64_t begin = 0, elements = 0;
  uint64_t bytes = 0;
  char checksum[16] = {};
};

std::string shard_file_name(int rank, int world) {
  if (world == 1) return "state.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "state-%05d-of-%05d.safetensors", rank, world);
  return buf;
}

// Runs `part` on this rank, then (with several ranks) learns whether it failed on any: then every
// rank throws, this one its own error or one saying a peer failed, so no rank goes on to a
// collective the others left.
template <class Fn>
void on_every_rank(const CheckpointRanks& ranks, int64_t step, Fn&& part) {
  std::exception_ptr failed;
  try {
    part();
  } catch (const std::exception&) {
    failed = std::current_exception();
  }
  const bool any = ranks.world > 1 ? ranks.any(bool(failed)) : bool(failed);
  if (failed) std::rethrow_exception(failed);
  if (any)
    throw UserError("checkpoint at step " + std::to_string(step) +
                    " not written: another rank failed to write its part (its log names the cause)");
}

// This rank's shard file in `tmp`, synced; its record (none when it owns no element).
ShardRecord write_shard(const fs::path& tmp, const TrainerState& s, int rank, int world) {
  ShardRecord r;
  r.begin = s.shard_begin;
  r.elements = s.master.numel();
  if (r.elements == 0) return r;
  const auto view = [](const char* name, const torch::Tensor& t) {
    return io::TensorView{name, io::DType::f32, {t.numel()}, t.data_ptr(), std::size_t(t.numel()) * 4};
  };
  const fs::path file = tmp / shard_file_name(rank, world);
  io::write_safetensors(file, {view("master", s.master), view("exp_avg", s.exp_avg), view("exp_avg_sq", s.exp_avg_sq)});
  fsync_path(file);
  const std::string sum = checkpoint_file_checksum(file, &r.bytes);
  std::copy(sum.begin(), sum.end(), r.checksum);
  return r;
}

// The lead rank's part: the small files, the manifest (last: it marks the checkpoint complete)
// listing every shard, the rename into place and the pruning to the newest `keep`.
void commit_checkpoint(const fs::path& root, const fs::path& tmp, const TrainerState& s,
                       const std::vector<ShardRecord>& shards, int keep) {
  const fs::path final_dir = root / step_name(s.step);
  {
    std::ofstream out(tmp / "rng.bin", std::ios::binary);
    out.write(reinterpret_cast<const char*>(s.sampling_rng.data()), std::streamsize(s.sampling_rng.size()));
  }
  nlohmann::json j{{"step", s.step},
                   {"optimizer_steps", s.optimizer_steps},
                   {"skipped_steps", s.skipped_steps},
                   {"scaler",
                    {{"scale", s.scaler.scale},
                     {"growth_tracker", s.scaler.growth_tracker},
                     {"hysteresis_tracker", s.scaler.hysteresis_tracker},
                     {"skipped_steps", s.scaler.skipped_steps}}},
                   {"data_rng", s.data_rng},
                   {"order", s.order},
                   {"cursor", s.cursor}};
  if (!s.compute.empty()) j["compute"] = s.compute;
  if (!s.pissa_start.empty())
    j["pissa_start"] = {{"checksum", s.pissa_start}, {"threads", s.pissa_threads}, {"cpu", s.pissa_cpu}};
  io::write_json_file(tmp / "trainer.json", j, -1);
  {
    std::ofstream cfg(tmp / "config.yaml");
    cfg << s.config_yaml;
  }
  nlohmann::json manifest = nlohmann::json::object();
  for (const char* f : kSmallFiles) {
    fsync_path(tmp / f);
    uint64_t bytes = 0;
    const std::string sum = checkpoint_file_checksum(tmp / f, &bytes);
    manifest[f] = {{"bytes", bytes}, {"fnv1a64", sum}};
  }
  nlohmann::json listed = nlohmann::json::array();
  for (std::size_t r = 0; r < shards.size(); ++r) {
    if (shards[r].elements == 0) continue;
    const std::string name = shard_file_name(int(r), int(shards.size()));
    manifest[name] = {{"bytes", shards[r].bytes}, {"fnv1a64", std::string(shards[r].checksum, 16)}};
    listed.push_back({{"file", name}, {"begin", shards[r].begin}, {"elements", shards[r].elements}});
  }
  if (shards.size() > 1) manifest[kShardsKey] = listed;
  io::write_json_file(tmp / "manifest.json", manifest);
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);
  fsync_path(root);
  const std::vector<fs::path> all = complete_checkpoints(root);
  for (std::size_t i = 0; keep > 0 && i + std::size_t(keep) < all.size(); ++i) fs::remove_all(all[i]);
}

}  // namespace

fs::path save_checkpoint(const fs::path& root, const TrainerState& s, int keep, const CheckpointRanks& ranks) {
  const int world = ranks.world, rank = ranks.rank;
  const fs::path tmp = root / (step_name(s.step) + ".tmp");
  try {
    on_every_rank(ranks, s.step, [&] {
      for (const torch::Tensor* t : {&s.master, &s.exp_avg, &s.exp_avg_sq}) {
        if (t->numel() != s.master.numel() || !t->is_contiguous() || !t->device().is_cpu())
          throw std::invalid_argument("save_checkpoint: the buffers must be contiguous host tensors of one length");
        if (precision::count_nonfinite(t->data_ptr<float>(), std::size_t(t->numel())) > 0)
          throw UserError("checkpoint at step " + std::to_string(s.step) +
                          " not written: the optimizer state holds NaN/Inf values" +
                          (world > 1 ? " (rank " + std::to_string(rank) + "'s shard)" : std::string()));
      }
      if (rank != 0) return;
      fs::create_directories(root);
      fs::remove_all(tmp);
      fs::create_directories(tmp);
    });
    ShardRecord mine;
    on_every_rank(ranks, s.step, [&] { mine = write_shard(tmp, s, rank, world); });
    std::vector<ShardRecord> shards(static_cast<std::size_t>(world));
    if (world > 1)
      ranks.all_gather_bytes(&mine, shards.data(), sizeof(ShardRecord));
    else
      shards[0] = mine;
    on_every_rank(ranks, s.step, [&] {
      if (rank == 0) commit_checkpoint(root, tmp, s, shards, keep);
    });
  } catch (const dist::PeerFailure&) {
    throw;  // a peer is gone: no collective is left to agree on anything
  } catch (...) {
    std::error_code ignored;  // every rank has left its part: the partial directory can go
    if (rank == 0) fs::remove_all(tmp, ignored);
    throw;
  }
  return root / step_name(s.step);
}

fs::path latest_checkpoint(const fs::path& root) {
  const std::vector<fs::path> all = complete_checkpoints(root);
  return all.empty() ? fs::path() : all.back();
}

fs::path resolve_resume_checkpoint(const fs::path& path) {
  if (fs::exists(path / "manifest.json")) return path;
  const fs::path latest = latest_checkpoint(path / "checkpoints");
  if (latest.empty())
    throw UserError("nothing to resume in '" + path.string() +
                    "': no checkpoint (expected <run dir>/checkpoints/step_N/manifest.json)");
  return latest;
}

namespace {

// A JSON field of a checkpoint file, reached by `keys` (object members; names may hold dots) with its
// type checked; errors name the file and the dotted key. Integers must be stored as JSON integers
// within the range of T (a float such as 1e300 is not silently truncated).
template <class T>
T field(const nlohmann::json& j, std::initializer_list<std::string> keys, const fs::path& file) {
  const nlohmann::json* at = &j;
  std::string path;
  for (const std::string& key : keys) {
    path += (path.empty() ? "" : ".") + key;
    if (!at->is_object() || !at->contains(key))
      throw UserError("checkpoint file '" + file.string() + "': missing key '" + path + "'");
    at = &(*at)[key];
  }
  const auto wrong = [&](const std::string& what) {
    return UserError("checkpoint file '" + file.string() + "': key '" + path + "' " + what);
  };
  if constexpr (std::is_integral_v<T>) {
    if (!at->is_number_integer())
      throw wrong("has the wrong type (" + std::string(at->type_name()) + "), expected an integer");
    if (at->is_number_unsigned() ? at->get<uint64_t>() > uint64_t(std::numeric_limits<T>::max())
                                 : at->get<int64_t>() < int64_t(std::numeric_limits<T>::min()))
      throw wrong("is out of range: " + at->dump());
    return at->get<T>();
  } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
    if (!at->is_array()) throw wrong("has the wrong type (" + std::string(at->type_name()) + "), expected a list");
    T out;
    out.reserve(at->size());
    for (const nlohmann::json& v : *at) {
      if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
        throw wrong("holds " + v.dump(-1).substr(0, 40) + " at index " + std::to_string(out.size()) +
                    ", expected integers");
      out.push_back(v.get<int64_t>());
    }
    return out;
  } else {
    try {
      return at->get<T>();
    } catch (const nlohmann::json::exception&) {
      throw wrong("has the wrong type (" + std::string(at->type_name()) + ")");
    }
  }
}

void require(bool ok, const fs::path& file, const std::string& what) {
  if (!ok) throw UserError("checkpoint file '" + file.string() + "' is inconsistent: " + what);
}

// Bytes of a CPU generator's state in this libtorch (what rng.bin must hold).
std::size_t sampling_rng_bytes() {
  return std::size_t(at::make_generator<at::CPUGeneratorImpl>(0).get_state().numel());
}

// Counters (steps, loss-scaler trackers) above this are not from a run (and step + 1 must not wrap).
constexpr int64_t kMaxCounter = int64_t(1) << 53;
// The loss scale and its reciprocal must be normal FP32 numbers (the optimizer unscales in FP32).
constexpr double kMinScale = 0x1p-126, kMaxScale = 0x1p126;

// Throws UserError (naming rng.bin) unless a CPU generator accepts `bytes` as its state: libtorch
// checks the Mersenne Twister's position and seeded flag, and would otherwise throw on resume.
void check_sampling_rng(const std::string& bytes, const fs::path& file) {
  const torch::Tensor state =
      torch::from_blob(const_cast<char*>(bytes.data()), {int64_t(bytes.size())}, torch::kUInt8).clone();
  at::Generator probe = at::make_generator<at::CPUGeneratorImpl>(0);
  try {
    probe.set_state(state);
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw UserError("checkpoint file '" + file.string() + "' is inconsistent: not a sampling generator state (" +
                    what.substr(0, what.find('\n')) + ")");
  }
}

}  // namespace

namespace {

// A state file's header, parsed (its own checks: dtypes, shapes, byte ranges within the file). A
// header that does not parse: a corrupted file says so by its checksum, first.
std::unique_ptr<io::MappedSafetensors> open_state(const fs::path& state_path, const nlohmann::json& manifest,
                                                  const fs::path& manifest_path) {
  if (!fs::exists(state_path)) throw UserError("checkpoint file '" + state_path.string() + "' is missing");
  try {
    return std::make_unique<io::MappedSafetensors>(state_path);
  } catch (const UserError&) {
    const auto expected = field<std::string>(manifest, {state_path.filename().string(), "fnv1a64"}, manifest_path);
    if (checkpoint_file_checksum(state_path) != expected)
      throw UserError("checkpoint file '" + state_path.string() + "' is corrupted (checksum mismatch)");
    throw;
  }
}

// One of the state's buffers: its bytes in the file and what the checksum pass found in them.
struct Range {
  std::string name;
  uint64_t begin = 0, end = 0;  // bytes in the file
  uint64_t nonfinite = 0, negative = 0;
};

// A state file's three flat FP32 buffers of one length (set into `length`), nothing else.
std::vector<Range> state_ranges(const io::MappedSafetensors& st, const fs::path& state_path, int64_t& length) {
  length = -1;
  for (const io::TensorView& t : st.tensors())
    require(t.name == "master" || t.name == "exp_avg" || t.name == "exp_avg_sq", state_path,
            "unexpected tensor '" + t.name + "' (a checkpoint holds master, exp_avg and exp_avg_sq)");
  std::vector<Range> ranges;
  for (const char* name : {"master", "exp_avg", "exp_avg_sq"}) {
    const io::TensorView* t = st.find(name);
    require(t != nullptr, state_path, std::string("tensor '") + name + "' is missing");
    require(t->dtype == io::DType::f32, state_path,
            std::string("tensor '") + name + "' is " + io::dtype_name(t->dtype) + ", expected F32");
    require(t->shape.size() == 1, state_path, std::string("tensor '") + name + "' is not a flat (1-D) buffer");
    const int64_t n = io::numel(t->shape);
    require(t->nbytes == std::size_t(n) * 4, state_path, std::string("tensor '") + name + "' byte size");
    if (length < 0) length = n;
    require(n == length, state_path,
            std::string("tensor '") + name + "' has " + std::to_string(n) + " elements, master has " +
                std::to_string(length));
    ranges.push_back({name, st.file_offset(*t), st.file_offset(*t) + t->nbytes});
  }
  return ranges;
}

// The state files the manifest lists, in element order: one state.safetensors (its length read
// later from its header), or the shards several ranks wrote: distinct state-*.safetensors files in
// this directory, contiguous from element 0.
std::vector<StateShard> listed_shards(const fs::path& dir, const nlohmann::json& manifest,
                                      const fs::path& manifest_path) {
  if (!manifest.contains(kShardsKey)) return {{dir / "state.safetensors", 0, -1}};
  const nlohmann::json& list = manifest[kShardsKey];
  require(list.is_array() && !list.empty(), manifest_path, std::string(kShardsKey) + " is not a non-empty list");
  std::vector<StateShard> out;
  int64_t next = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = std::string(kShardsKey) + "[" + std::to_string(i) + "]";
    require(list[i].is_object(), manifest_path, at + " is not an object");
    const auto name = field<std::string>(list[i], {"file"}, manifest_path);
    const auto begin = field<int64_t>(list[i], {"begin"}, manifest_path);
    const auto elements = field<int64_t>(list[i], {"elements"}, manifest_path);
    const std::string suffix = ".safetensors";
    require(name.rfind("state-", 0) == 0 && name.size() > suffix.size() &&
                name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                name.find('/') == std::string::npos,
            manifest_path, at + " names '" + name + "', expected a state-*.safetensors file of this directory");
    for (const StateShard& seen : out)
      require(seen.file.filename() != name, manifest_path, at + " lists '" + name + "' a second time");
    require(begin == next, manifest_path,
            at + " begins at element " + std::to_string(begin) + ", expected " + std::to_string(next) +
                " (the shards cover the buffers in order)");
    require(elements > 0 && elements <= kMaxCounter, manifest_path,
            at + " has " + std::to_string(elements) + " elements, expected 1 to 2^53");
    out.push_back({dir / name, begin, elements});
    next += elements;
  }
  return out;
}

// One file's size and checksum against the manifest, in one read; a state file's buffers' values
// counted on the way (non-finite, negative second moments) and refused after.
void verify_file(const fs::path& p, const nlohmann::json& manifest, const fs::path& manifest_path,
                 std::vector<Range>* ranges) {
  const std::string f = p.filename().string();
  const auto bytes_expected = field<std::size_t>(manifest, {f, "bytes"}, manifest_path);
  const auto checksum = field<std::string>(manifest, {f, "fnv1a64"}, manifest_path);
  if (!fs::exists(p)) throw UserError("checkpoint file '" + p.string() + "' is missing");
  Fnv1a h;
  const uint64_t size = for_each_block(p, [&](uint64_t at, const unsigned char* bytes, std::size_t len) {
    h.add(bytes, len);
    if (!ranges) return;
    for (Range& r : *ranges) {  // the buffers' values in this block (4-byte aligned: offsets are)
      const uint64_t b = std::max(r.begin, at), e = std::min(r.end, at + len);
      if (b >= e) continue;
      const float* x = reinterpret_cast<const float*>(bytes + (b - at));
      const std::size_t count = std::size_t(e - b) / 4;
      r.nonfinite += precision::count_nonfinite(x, count, {1});
      if (r.name == "exp_avg_sq")
        for (std::size_t i = 0; i < count; ++i) r.negative += x[i] < 0;
    }
  });
  if (size != bytes_expected)
    throw UserError("checkpoint file '" + p.string() + "' is truncated or altered: " + std::to_string(size) +
                    " bytes, manifest says " + std::to_string(bytes_expected));
  if (h.hex() != checksum) throw UserError("checkpoint file '" + p.string() + "' is corrupted (checksum mismatch)");
  if (!ranges) return;
  // The checksums prove the files are the ones written; what follows proves they make sense (a
  // tampered or buggy writer), before anything of the run is touched.
  for (const Range& r : *ranges) require(r.nonfinite == 0, p, "tensor '" + r.name + "' holds NaN/Inf values");
  require((*ranges)[2].negative == 0, p, "tensor 'exp_avg_sq' holds negative values");
}

// Every state file's header, lengths and values, and the small files' checksums; the shards'
// lengths filled in (one state.safetensors) and their total returned.
int64_t verify_files(const fs::path& dir, const nlohmann::json& manifest, const fs::path& manifest_path,
                     std::vector<StateShard>& shards) {
  int64_t total = 0;
  for (StateShard& sh : shards) {
    const std::unique_ptr<io::MappedSafetensors> mapped = open_state(sh.file, manifest, manifest_path);
    int64_t length = -1;
    std::vector<Range> ranges = state_ranges(*mapped, sh.file, length);
    if (sh.elements < 0) sh.elements = length;
    require(length == sh.elements, sh.file,
            "it holds " + std::to_string(length) + " elements per buffer, the manifest lists " +
                std::to_string(sh.elements));
    verify_file(sh.file, manifest, manifest_path, &ranges);
    total += length;
  }
  for (const char* f : kSmallFiles) verify_file(dir / f, manifest, manifest_path, nullptr);
  return total;
}

// trainer.json's fields, then their sense: counters within 2^53, the scaler's scale in range, the
// data order a permutation with the cursor inside it, the data generator's state readable.
void read_trainer_state(const fs::path& trainer_path, TrainerState& s) {
  const nlohmann::json j = io::read_json_file(trainer_path);
  s.step = field<int64_t>(j, {"step"}, trainer_path);
  s.optimizer_steps = field<int64_t>(j, {"optimizer_steps"}, trainer_path);
  s.skipped_steps = field<int64_t>(j, {"skipped_steps"}, trainer_path);
  s.scaler.scale = field<double>(j, {"scaler", "scale"}, trainer_path);
  s.scaler.growth_tracker = field<int64_t>(j, {"scaler", "growth_tracker"}, trainer_path);
  s.scaler.hysteresis_tracker = field<int64_t>(j, {"scaler", "hysteresis_tracker"}, trainer_path);
  s.scaler.skipped_steps = field<int64_t>(j, {"scaler", "skipped_steps"}, trainer_path);
  s.data_rng = field<std::string>(j, {"data_rng"}, trainer_path);
  s.order = field<std::vector<int64_t>>(j, {"order"}, trainer_path);
  s.cursor = field<int64_t>(j, {"cursor"}, trainer_path);
  if (j.contains("compute")) {  // absent in checkpoints written before precision.compute: auto
    s.compute = field<std::string>(j, {"compute"}, trainer_path);
    require(s.compute == "native" || s.compute == "fp32", trainer_path,
            "compute is '" + s.compute + "', expected native or fp32 (the resolved precision.compute)");
  }
  if (j.contains("pissa_start")) {  // LoRA with PiSSA only
    s.pissa_start = field<std::string>(j, {"pissa_start", "checksum"}, trainer_path);
    s.pissa_threads = field<int64_t>(j, {"pissa_start", "threads"}, trainer_path);
    s.pissa_cpu = field<std::string>(j, {"pissa_start", "cpu"}, trainer_path);
    require(s.pissa_start.size() == 16 && s.pissa_start.find_first_not_of("0123456789abcdef") == std::string::npos,
            trainer_path, "pissa_start.checksum is '" + s.pissa_start + "', expected 16 hex digits");
  }
  require(s.step >= 1 && s.step <= kMaxCounter, trainer_path,
          "step " + std::to_string(s.step) + " (checkpoints start at step 1; at most 2^53)");
  const auto counter = [&](int64_t v, const char* key) {
    require(v >= 0 && v <= kMaxCounter, trainer_path,
            std::string(key) + " " + std::to_string(v) + " outside [0, 2^53]");
  };
  counter(s.optimizer_steps, "optimizer_steps");
  counter(s.skipped_steps, "skipped_steps");
  counter(s.scaler.growth_tracker, "scaler.growth_tracker");
  counter(s.scaler.hysteresis_tracker, "scaler.hysteresis_tracker");
  counter(s.scaler.skipped_steps, "scaler.skipped_steps");
  require(std::isfinite(s.scaler.scale) && s.scaler.scale >= kMinScale && s.scaler.scale <= kMaxScale, trainer_path,
          "scaler.scale must be finite and within [2^-126, 2^126], got " + std::to_string(s.scaler.scale));
  require(s.cursor >= 0 && std::size_t(s.cursor) <= s.order.size(), trainer_path,
          "cursor " + std::to_string(s.cursor) + " outside the data order of " + std::to_string(s.order.size()));
  std::vector<bool> seen(s.order.size(), false);  // the order must be a permutation of 0..n-1
  for (const int64_t i : s.order) {
    require(i >= 0 && std::size_t(i) < s.order.size() && !seen[std::size_t(i)], trainer_path,
            "data order is not a permutation (index " + std::to_string(i) + ")");
    seen[std::size_t(i)] = true;
  }
  std::mt19937_64 engine;
  std::istringstream rng_text(s.data_rng);
  rng_text >> engine;
  require(!rng_text.fail() && (rng_text >> std::ws).eof(), trainer_path, "data_rng is not a generator state");
}

}  // namespace

TrainerState load_checkpoint(const fs::path& dir, CheckpointBuffers buffers) {
  const fs::path manifest_path = dir / "manifest.json";
  const nlohmann::json manifest = io::read_json_file(manifest_path);
  TrainerState s;
  s.shards = listed_shards(dir, manifest, manifest_path);
  s.elements = verify_files(dir, manifest, manifest_path, s.shards);
  if (buffers == CheckpointBuffers::load) {
    for (auto [name, dst] : {std::pair{"master", &s.master}, {"exp_avg", &s.exp_avg}, {"exp_avg_sq", &s.exp_avg_sq}}) {
      *dst = torch::empty({s.elements}, torch::kFloat32);
      read_checkpoint_buffer(s, name, 0, s.elements, dst->data_ptr<float>());
    }
  }
  const fs::path rng_path = dir / "rng.bin";
  const std::string rng = read_bytes(rng_path);
  require(
      rng.size() == sampling_rng_bytes(), rng_path,
      std::to_string(rng.size()) + " bytes, a sampling generator state has " + std::to_string(sampling_rng_bytes()));
  check_sampling_rng(rng, rng_path);
  s.sampling_rng.assign(rng.begin(), rng.end());
  read_trainer_state(dir / "trainer.json", s);
  s.config_yaml = read_bytes(dir / "config.yaml");
  return s;
}

namespace {

// Elements [begin, begin + n) of buffer `name` of one state file into out[0, n), read with pread.
void read_shard(const StateShard& sh, const std::string& name, int64_t begin, int64_t n, float* out) {
  const io::MappedSafetensors st(sh.file);  // the header only
  const io::TensorView* t = st.find(name);
  if (!t || t->dtype != io::DType::f32 || t->nbytes != std::size_t(sh.elements) * 4)
    throw UserError("checkpoint file '" + sh.file.string() + "' changed since it was checked (tensor '" + name + "')");
  const int fd = ::open(sh.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError("checkpoint: cannot read '" + sh.file.string() + "'");
  char* dst = reinterpret_cast<char*>(out);
  const std::size_t len = std::size_t(n) * 4;
  const uint64_t at = st.file_offset(*t) + uint64_t(begin) * 4;
  for (std::size_t done = 0; done < len;) {
    const ssize_t got = ::pread(fd, dst + done, std::min(len - done, kReadBlock * 4), off_t(at + done));
    if (got <= 0) {
      ::close(fd);
      throw UserError("checkpoint: cannot read '" + sh.file.string() + "' (truncated?)");
    }
    done += std::size_t(got);
  }
  ::close(fd);
}

}  // namespace

void read_checkpoint_buffer(const TrainerState& s, const std::string& name, int64_t begin, int64_t n, float* out) {
  if (begin < 0 || n < 0 || begin + n > s.elements)
    throw std::invalid_argument("read_checkpoint_buffer: range outside the buffers");
  for (const StateShard& sh : s.shards) {
    const int64_t b = std::max(begin, sh.begin), e = std::min(begin + n, sh.begin + sh.elements);
    if (b < e) read_shard(sh, name, b - sh.begin, e - b, out + (b - begin));
  }
}

void check_checkpoint_fits(const TrainerState& s, int64_t flat_params, std::size_t train_records, const fs::path& dir) {
  if (s.elements != flat_params)
    throw UserError("checkpoint " + dir.string() + " holds " + std::to_string(s.elements) +
                    " parameters, the model (grpo.base_model) has " + std::to_string(flat_params));
  if (s.order.size() != train_records)
    throw UserError("checkpoint " + dir.string() + " was written for " + std::to_string(s.order.size()) +
                    " training records, the data has " + std::to_string(train_records));
}

}  // namespace unstuck::train
