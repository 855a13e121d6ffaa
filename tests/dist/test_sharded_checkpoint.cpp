// Per-rank checkpoints: two ranks each write their own shard of the FP32 master and AdamW moments
// (no rank gathers the whole), and the checkpoint resumes bit-exactly at another world size: three
// ranks read it, take a step and write three shards; one process reads either. In bf16_sr, fp8_sr
// (whose per-channel scales span the shards' boundary) and LoRA, the states equal an unsharded
// run's bit for bit at every point. A broken shard layout is refused, naming the file.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "common/error_of.h"
#include "common/model_shape.h"
#include "dist/dist_workers.h"
#include "unstuck/config/config.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/lora.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::dist {
namespace {

namespace fs = std::filesystem;
using train::TrainerState;

struct Case {
  const char* name;
  precision::PrecisionMode mode;
  bool lora;
};
const Case kCases[] = {{"bf16_sr", precision::PrecisionMode::bf16_sr, false},
                       {"fp8_sr", precision::PrecisionMode::fp8_sr, false},
                       {"lora_bf16_sr", precision::PrecisionMode::bf16_sr, true}};

// ~97K parameters, six norm blocks: two or three ranks each own a part (test_sharded_update.cpp).
model::ModelConfig model_config() { return unstuck::testing::model_shape(64, 72, 2, 2, 1, 128, 16); }
model::LoraSpec lora_spec() {
  model::LoraConfig l;
  l.rank = 24;
  return model::lora_spec(l);
}

// The state of a case from its fixed start (sharded over `comm` when given).
std::unique_ptr<train::TrainableWeights> make_weights(const Case& c, Communicator* comm) {
  const model::ModelConfig mc = model_config();
  const int64_t total = c.lora ? model::lora_layout(mc, lora_spec()).total : model::llama_layout(mc).total;
  precision::PrecisionConfig pc;
  pc.mode = c.mode;
  pc.threads = 1;
  train::FrozenBase base;
  if (c.lora) {
    base.spec = lora_spec();
    base.weights = torch::randn({model::llama_layout(mc).total}, at::make_generator<at::CPUGeneratorImpl>(5)) * 0.05;
  }
  const torch::Tensor master = torch::randn({total}, at::make_generator<at::CPUGeneratorImpl>(7)) * 0.05;
  return std::make_unique<train::TrainableWeights>(mc, master, pc, /*rounding_seed=*/11, comm, std::move(base));
}

// Optimizer step k's gradient (randn * 1e-2, seeded by k): at world size 2 each rank adds half
// (halves sum back exactly), otherwise rank 0 adds all of it.
void step(train::TrainableWeights& w, int k, Communicator* comm) {
  precision::OptimConfig oc;
  oc.grad_clip = 0.5;
  oc.weight_decay = 0.1;
  const int W = comm ? comm->world_size() : 1, rank = comm ? comm->rank() : 0;
  const float share = W == 2 ? 0.5f : (rank == 0 ? 1.0f : 0.0f);
  const torch::Tensor g = torch::randn({w.layout().total}, at::make_generator<at::CPUGeneratorImpl>(100 + k)) * 1e-2;
  w.add_flat_grad(g * share);
  w.optimizer_step(oc, 1e-3);
}

// The trainer's fields a checkpoint must hold, valid as a resume reads them; the buffers this
// rank's shard of `w`.
TrainerState state_of(const train::TrainableWeights& w, int64_t step) {
  TrainerState s;
  s.step = step;
  s.optimizer_steps = w.optimizer_steps();
  s.scaler = w.scaler_state();
  std::ostringstream rng;
  rng << std::mt19937_64(3);
  s.data_rng = rng.str();
  s.order = {2, 0, 1};
  const torch::Tensor gen = at::make_generator<at::CPUGeneratorImpl>(9).get_state();
  s.sampling_rng.assign(gen.data_ptr<uint8_t>(), gen.data_ptr<uint8_t>() + gen.numel());
  s.config_yaml = "test: sharded checkpoint\n";
  s.master = w.master();
  s.exp_avg = w.exp_avg();
  s.exp_avg_sq = w.exp_avg_sq();
  s.shard_begin = w.shard_begin();
  s.elements = w.layout().total;
  return s;
}

// Restores `w` from the checkpoint `dir`, reading only this rank's slices from the files.
void restore(train::TrainableWeights& w, const fs::path& dir) {
  const TrainerState st = train::load_checkpoint(dir, train::CheckpointBuffers::defer);
  w.restore([&](const std::string& name, int64_t begin, int64_t n,
                float* out) { train::read_checkpoint_buffer(st, name, begin, n, out); },
            st.optimizer_steps, st.scaler);
}

void write_bits(const fs::path& p, const torch::Tensor& t) {
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(t.data_ptr()), std::streamsize(t.numel() * t.element_size()));
}

// save: two steps at world size 2, checkpoint step 2 into <case>/two. resume: read it at this
// world size, take step 3, checkpoint into <case>/three; rank 0 writes its compute weights' bits.
int sharded_checkpoint_worker() {
  const auto comm = make_gloo_communicator(launch_env_from_environment(), 30);
  const std::string phase = std::getenv("UNSTUCK_TEST_PHASE");
  if (phase == "nan") {  // rank 1's shard holds a NaN: every rank refuses, no checkpoint appears
    auto w = make_weights(kCases[0], comm.get());
    TrainerState s = state_of(*w, 1);
    if (comm->rank() == 1) s.master = s.master.clone().index_fill_(0, torch::tensor({3}), NAN);
    const std::string e =
        unstuck::testing::error_of([&] { train::save_checkpoint(testing::worker_dir() / "nan", s, 0, comm.get()); });
    std::ofstream(testing::worker_dir() / ("nan_rank" + std::to_string(comm->rank()) + ".txt")) << e;
    return 0;
  }
  for (const Case& c : kCases) {
    const fs::path dir = testing::worker_dir() / c.name;
    auto w = make_weights(c, comm.get());
    if (phase == "save") {
      for (int k = 1; k <= 2; ++k) step(*w, k, comm.get());
      train::save_checkpoint(dir / "two", state_of(*w, 2), 0, comm.get());
    } else {
      restore(*w, train::latest_checkpoint(dir / "two"));
      step(*w, 3, comm.get());
      train::save_checkpoint(dir / "three", state_of(*w, 3), 0, comm.get());
      if (comm->rank() == 0) write_bits(dir / "compute.bin", w->compute().contiguous());
    }
  }
  return 0;
}
const bool kShardedCheckpoint = testing::register_worker("sharded_checkpoint", sharded_checkpoint_worker);

std::vector<std::string> state_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void expect_state_equal(const TrainerState& got, const train::TrainableWeights& want, const std::string& what) {
  EXPECT_TRUE(torch::equal(got.master, want.master())) << what << ": master";
  EXPECT_TRUE(torch::equal(got.exp_avg, want.exp_avg())) << what << ": exp_avg";
  EXPECT_TRUE(torch::equal(got.exp_avg_sq, want.exp_avg_sq())) << what << ": exp_avg_sq";
  EXPECT_EQ(got.optimizer_steps, want.optimizer_steps()) << what;
}

// A copy of the two ranks' checkpoint `good` at `at`, its manifest rewritten by `edit`.
fs::path tampered(const fs::path& good, const fs::path& at, const std::function<void(nlohmann::json&)>& edit) {
  fs::remove_all(at);
  fs::create_directories(at.parent_path());
  fs::copy(good, at, fs::copy_options::recursive);
  nlohmann::json m = io::read_json_file(at / "manifest.json");
  edit(m);
  io::write_json_file(at / "manifest.json", m);
  return at;
}

// Each broken shard layout is refused with an error naming the file and what is wrong.
void expect_bad_shards_named(const fs::path& good, const fs::path& scratch) {
  using unstuck::testing::error_of;
  const auto load = [](const fs::path& d) { return [d] { train::load_checkpoint(d); }; };
  const std::string shard1 = "state-00001-of-00002.safetensors";
  fs::path d = tampered(good, scratch / "missing", [](nlohmann::json&) {});
  fs::remove(d / shard1);
  EXPECT_NE(error_of(load(d)).find(shard1 + "' is missing"), std::string::npos) << error_of(load(d));
  d = tampered(good, scratch / "flipped", [](nlohmann::json&) {});
  {
    std::fstream f(d / shard1, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-5, std::ios::end);
    f.put('\x7f');
  }
  EXPECT_NE(error_of(load(d)).find(shard1 + "' is corrupted (checksum mismatch)"), std::string::npos)
      << error_of(load(d));
  d = tampered(good, scratch / "gap", [](nlohmann::json& m) { m["state_shards"][1]["begin"] = 1; });
  EXPECT_NE(error_of(load(d)).find("state_shards[1] begins at element 1, expected"), std::string::npos)
      << error_of(load(d));
  d = tampered(good, scratch / "count", [](nlohmann::json& m) {
    m["state_shards"][1]["elements"] = m["state_shards"][1]["elements"].get<int64_t>() + 1;
  });
  EXPECT_NE(error_of(load(d)).find("elements per buffer, the manifest lists"), std::string::npos) << error_of(load(d));
  d = tampered(good, scratch / "outside",
               [](nlohmann::json& m) { m["state_shards"][1]["file"] = "../state-x.safetensors"; });
  EXPECT_NE(error_of(load(d)).find("expected a state-*.safetensors file of this directory"), std::string::npos)
      << error_of(load(d));
  d = tampered(good, scratch / "twice",
               [](nlohmann::json& m) { m["state_shards"][1]["file"] = m["state_shards"][0]["file"]; });
  EXPECT_NE(error_of(load(d)).find("a second time"), std::string::npos) << error_of(load(d));
  fs::remove_all(scratch);
}

TEST(ShardedCheckpoint, TwoRanksWriteTheirShardsAndAnyWorldSizeResumesBitExactly) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_sharded_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_EQ(testing::run_workers("sharded_checkpoint", 2, dir, {{"UNSTUCK_TEST_PHASE", "save"}}), 0);
  ASSERT_EQ(testing::run_workers("sharded_checkpoint", 3, dir, {{"UNSTUCK_TEST_PHASE", "resume"}}), 0);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    // The unsharded run: steps 1, 2 (the checkpoint), 3.
    auto ref = make_weights(c, nullptr);
    for (int k = 1; k <= 2; ++k) step(*ref, k, nullptr);
    const fs::path two = train::latest_checkpoint(dir / c.name / "two");
    ASSERT_FALSE(two.empty());
    // Each rank wrote its own shard, about half of the state; no file holds the whole.
    EXPECT_EQ(state_files(two),
              (std::vector<std::string>{"state-00000-of-00002.safetensors", "state-00001-of-00002.safetensors"}));
    const int64_t total = ref->layout().total;
    for (const std::string& f : state_files(two)) EXPECT_LT(fs::file_size(two / f), uint64_t(total) * 12 * 3 / 4) << f;
    expect_state_equal(train::load_checkpoint(two), *ref, "world size 2, step 2");

    // One process resumes the two ranks' checkpoint and continues as the unsharded run.
    auto one = make_weights(c, nullptr);
    restore(*one, two);
    step(*one, 3, nullptr);
    step(*ref, 3, nullptr);
    expect_state_equal(train::load_checkpoint(train::latest_checkpoint(dir / c.name / "three")), *ref,
                       "world size 2 -> 3, step 3");
    EXPECT_TRUE(torch::equal(one->master(), ref->master()));
    EXPECT_TRUE(torch::equal(one->exp_avg_sq(), ref->exp_avg_sq()));
    const fs::path three = train::latest_checkpoint(dir / c.name / "three");
    // A rank whose shard holds no element (LoRA's 53K at three ranks of 32K) writes no file.
    constexpr int64_t kNormBlock = 1 << 14;  // shards start on these (trainable_weights.cpp)
    const int64_t shard = (total + 3 * kNormBlock - 1) / (3 * kNormBlock) * kNormBlock;
    EXPECT_EQ(int64_t(state_files(three).size()), (total + shard - 1) / shard);
    // Three ranks' compute weights: the unsharded run's bits.
    const torch::Tensor compute = ref->compute().contiguous();
    std::ifstream in(dir / c.name / "compute.bin", std::ios::binary);
    std::vector<char> bits(std::size_t(compute.numel() * compute.element_size()));
    in.read(bits.data(), std::streamsize(bits.size()));
    ASSERT_TRUE(in) << "compute.bin";
    // (The model's tensors: the alignment gaps between them belong to no tensor and no update.)
    const torch::Tensor got = torch::from_blob(bits.data(), {compute.numel()}, torch::kShort);
    for (const model::ParamEntry& e : ref->layout().entries)
      EXPECT_TRUE(
          torch::equal(got.narrow(0, e.offset, e.numel), compute.view(torch::kShort).narrow(0, e.offset, e.numel)))
          << "compute weights of " << e.name << " at world size 3";
  }
  // A NaN in one rank's shard: both ranks refuse, each saying why, and nothing is written.
  ASSERT_EQ(testing::run_workers("sharded_checkpoint", 2, dir, {{"UNSTUCK_TEST_PHASE", "nan"}}), 0);
  const auto said = [&](int rank) {
    std::ifstream in(dir / ("nan_rank" + std::to_string(rank) + ".txt"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(said(1), "checkpoint at step 1 not written: the optimizer state holds NaN/Inf values (rank 1's shard)");
  EXPECT_EQ(said(0),
            "checkpoint at step 1 not written: another rank failed to write its part (its log names the cause)");
  EXPECT_TRUE(fs::is_empty(dir / "nan"));  // not even the temporary directory is left
  expect_bad_shards_named(train::latest_checkpoint(dir / "bf16_sr" / "two"), dir / "tampered");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace unstuck::dist
