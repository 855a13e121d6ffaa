// ZeRO-1: two ranks that each own half of the FP32 master and AdamW moments, fed the same
// gradients (each adds half, the reduce-scatter sums them back exactly), produce bit for bit the master,
// moments, rounded compute weights, gradient norm (clipping active) and sticking counts of the
// unsharded single-process step, in every precision mode; so do LoRA adapters on a frozen base in
// every mode but FP8.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>

#include "dist/dist_workers.h"
#include "unstuck/common/cuda_info.h"
#include "unstuck/config/config.h"
#include "unstuck/model/lora.h"
#include "unstuck/train/trainable_weights.h"
#include "common/model_shape.h"

namespace unstuck::dist {
namespace {

namespace fs = std::filesystem;
constexpr int kSteps = 3;
const precision::PrecisionMode kModes[] = {precision::PrecisionMode::fp32,    precision::PrecisionMode::bf16,
                                           precision::PrecisionMode::bf16_sr, precision::PrecisionMode::fp16,
                                           precision::PrecisionMode::fp16_sr, precision::PrecisionMode::fp8_rn,
                                           precision::PrecisionMode::fp8_sr};

// ~97K parameters: several norm blocks, the last rank's shard is padded, and rows of 72 put an FP8
// channel (a row of layer 1's q_proj) across the boundary of two ranks' shards (checked below).
model::ModelConfig model_config() { return unstuck::testing::model_shape(64, 72, 2, 2, 1, 128, 16); }

struct Result {
  torch::Tensor master, exp_avg, exp_avg_sq, compute_bits, grad_norms, changed;
};

// LoRA: rank-24 adapters on all seven projections (53K elements, four norm blocks: two per rank)
// on a frozen base.
model::LoraSpec lora_spec() {
  model::LoraConfig l;
  l.rank = 24;
  return model::lora_spec(l);
}

// kSteps AdamW steps from a fixed master; each step's gradient is randn * 1e-2 (seeded by the step),
// of which this process adds `share` (1 alone, 0.5 on each of two ranks: halves sum back exactly).
// With `lora` the master is the adapters' and the model's weights are a frozen base.
Result run_steps(precision::PrecisionMode mode, Communicator* comm, float share, bool lora = false) {
  const model::ModelConfig mc = model_config();
  const int64_t total = lora ? model::lora_layout(mc, lora_spec()).total : model::llama_layout(mc).total;
  precision::PrecisionConfig pc;
  pc.mode = mode;
  pc.threads = 1;
  precision::OptimConfig oc;
  oc.grad_clip = 0.5;  // the randn gradient's norm is ~2.9: clipping is active
  oc.weight_decay = 0.1;
  torch::Tensor master = torch::randn({total}, at::make_generator<at::CPUGeneratorImpl>(7)) * 0.05;
  train::FrozenBase base;
  if (lora) {
    base.spec = lora_spec();
    base.weights = torch::randn({model::llama_layout(mc).total}, at::make_generator<at::CPUGeneratorImpl>(5)) * 0.05;
  }
  train::TrainableWeights w(mc, master, pc, /*rounding_seed=*/11, comm, std::move(base));
  std::vector<double> norms;
  std::vector<int64_t> changed;
  for (int k = 1; k <= kSteps; ++k) {
    const torch::Tensor g = torch::randn({total}, at::make_generator<at::CPUGeneratorImpl>(100 + k)) * 1e-2;
    w.add_flat_grad(g * share);
    const train::OptimizerStepStats s = w.optimizer_step(oc, 1e-3);
    norms.push_back(s.grad_norm);
    changed.insert(changed.end(), s.changed_per_tensor.begin(), s.changed_per_tensor.end());
  }
  const train::FullOptimizerState st = w.gather_state();
  const torch::Tensor c = w.compute();
  return {st.master.clone(),
          st.exp_avg.clone(),
          st.exp_avg_sq.clone(),
          c.element_size() == 2 ? c.view(torch::kShort).clone() : c.view(torch::kInt).clone(),
          torch::tensor(norms, torch::kDouble),
          torch::tensor(changed, torch::kLong)};
}

void write(const fs::path& p, const torch::Tensor& t) {
  std::ofstream out(p, std::ios::binary);
  out.write(static_cast<const char*>(t.data_ptr()), std::streamsize(t.numel() * t.element_size()));
}
torch::Tensor read(const fs::path& p, const torch::Tensor& like) {
  torch::Tensor t = torch::empty_like(like);
  std::ifstream in(p, std::ios::binary);
  in.read(static_cast<char*>(t.data_ptr()), std::streamsize(t.numel() * t.element_size()));
  return in ? t : torch::Tensor();
}

const char* kFields[] = {"master", "exp_avg", "exp_avg_sq", "compute", "grad_norms", "changed"};
std::vector<torch::Tensor*> fields(Result& r) {
  return {&r.master, &r.exp_avg, &r.exp_avg_sq, &r.compute_bits, &r.grad_norms, &r.changed};
}

int sharded_adamw_worker() {
  const LaunchEnv env = launch_env_from_environment();
  const char* backend = std::getenv("UNSTUCK_TEST_BACKEND");
  const auto comm =
      backend && std::string(backend) == "nccl" ? make_nccl_communicator(env, 60) : make_gloo_communicator(env, 30);
  for (bool lora : {false, true})
    for (auto mode : kModes) {
      if (lora && precision::is_fp8(mode)) continue;
      // 1/W of the gradient on each rank sums back exactly for W a power of two; otherwise rank 0
      // contributes all of it.
      const int W = comm->world_size();
      const float share = (W & (W - 1)) == 0 ? 1.0f / float(W) : (comm->rank() == 0 ? 1.0f : 0.0f);
      Result r = run_steps(mode, comm.get(), share, lora);
      if (comm->rank() != 0) continue;
      const auto f = fields(r);
      for (std::size_t i = 0; i < f.size(); ++i)
        write(testing::worker_dir() / (std::string(lora ? "lora_" : "") + config::enum_name(mode) + "." + kFields[i]),
              *f[i]);
    }
  return 0;
}
const bool kShardedAdamw = testing::register_worker("sharded_adamw", sharded_adamw_worker);

// Runs the sharded worker as `world` ranks of `backend` and compares with one unsharded process.
void expect_sharded_equals_unsharded(const std::string& backend, int world) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_zero1_" + backend + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_EQ(testing::run_workers("sharded_adamw", world, dir, {{"UNSTUCK_TEST_BACKEND", backend}}), 0);
  for (bool lora : {false, true})
    for (auto mode : kModes) {
      if (lora && precision::is_fp8(mode)) continue;
      const std::string tag = std::string(lora ? "lora_" : "") + config::enum_name(mode);
      Result ref = run_steps(mode, nullptr, 1.0f, lora);
      const auto f = fields(ref);
      for (std::size_t i = 0; i < f.size(); ++i) {
        const torch::Tensor got = read(dir / (tag + "." + kFields[i]), *f[i]);
        ASSERT_TRUE(got.defined()) << tag << " " << kFields[i];
        EXPECT_TRUE(torch::equal(got, *f[i])) << tag << " " << kFields[i];
      }
      EXPECT_GT(ref.changed.sum().item<int64_t>(), 0) << tag;
    }
  fs::remove_all(dir);
}

TEST(ShardedUpdate, TwoRanksAreBitIdenticalToOneProcess) {
  // FP8: a channel split between the two shards takes the maximum of both parts for its scale.
  const model::ParamLayout layout = model::llama_layout(model_config());
  constexpr int64_t kNormBlock = 1 << 14;  // shards start on these (trainable_weights.cpp)
  const int64_t shard = (layout.total + 2 * kNormBlock - 1) / (2 * kNormBlock) * kNormBlock;
  bool split = false;
  for (const precision::Fp8Matrix& m : layout.fp8_matrices())
    split = split || (int64_t(m.offset) < shard && shard < int64_t(m.offset + m.rows * m.cols) &&
                      (shard - int64_t(m.offset)) % int64_t(m.cols) != 0);
  EXPECT_TRUE(split) << "no FP8 row crosses the shard boundary at " << shard;
  EXPECT_GT(model::lora_layout(model_config(), lora_spec()).total, 3 * kNormBlock);  // two blocks per rank
  expect_sharded_equals_unsharded("gloo", 2);
}

// One rank per visible GPU; the collectives go through NCCL.
TEST(Nccl, ShardedUpdateIsBitIdenticalToOneProcess) {
  const std::string why = nccl_unavailable_reason();
  if (!why.empty()) GTEST_SKIP() << "NCCL not usable here: " << why;
  expect_sharded_equals_unsharded("nccl", cuda_device_count());
}

}  // namespace
}  // namespace unstuck::dist
