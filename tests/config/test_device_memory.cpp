// run.device resolution (cpu, auto, cuda without a device, LOCAL_RANK beyond the devices) and the
// GRPO memory pre-flight: a config that cannot fit is refused naming the knob to turn, the log-prob
// row chunk lowers the estimate, the ranks of LOCAL_WORLD_SIZE share the machine's memory, and a GPU
// run is held to its own GPU's free memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/config/device.h"
#include "unstuck/config/preflight.h"

namespace unstuck {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no UserError>";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(ResolveDevice, CpuAutoAndCuda) {
  EXPECT_EQ(resolve_device(DeviceKind::cpu, 0, 4, "").name(), "cpu");
  EXPECT_EQ(resolve_device(DeviceKind::auto_, 0, 0, "no driver").name(), "cpu");
  EXPECT_EQ(resolve_device(DeviceKind::auto_, 1, 2, "").name(), "cuda:1");
  EXPECT_EQ(resolve_device(DeviceKind::cuda, 0, 1, "").name(), "cuda:0");
  const std::string none = error_of([] { resolve_device(DeviceKind::cuda, 0, 0, "no CUDA driver found"); });
  EXPECT_TRUE(has(none, "run.device is cuda but no CUDA device is usable: no CUDA driver found")) << none;
  const std::string beyond = error_of([] { resolve_device(DeviceKind::auto_, 2, 2, ""); });
  EXPECT_TRUE(has(beyond, "LOCAL_RANK 2 has no CUDA device of its own (this machine has 2)")) << beyond;
}

TEST(ResolveDevice, ThisMachine) {
  RunConfig c;
  c.run.device = DeviceKind::cpu;
  EXPECT_EQ(resolve_device(c, 0).name(), "cpu");
  c.run.device = DeviceKind::cuda;
  if (cuda_device_count() == 0) {
    EXPECT_TRUE(has(error_of([&] { resolve_device(c, 0); }), "run.device is cuda but no CUDA device is usable"));
    GTEST_SKIP() << "no CUDA device: the cuda case is covered by the error only";
  }
  EXPECT_EQ(resolve_device(c, 0).name(), "cuda:0");
  c.run.device = DeviceKind::auto_;
  EXPECT_EQ(resolve_device(c, 0).name(), "cuda:0");
}

// A 152k-vocabulary model with long completions, as issue 13 describes: the logits of a whole
// minibatch do not fit 64 GiB; the error names the knob; row chunks and minibatches bring it down.
RunConfig big_vocab_run() {
  RunConfig c;
  c.model.vocab_size = 151936;
  c.model.dim = 896;
  c.model.n_layers = 24;
  c.model.n_heads = 14;
  c.model.n_kv_heads = 2;
  c.model.ffn_dim = 4864;
  c.model.max_seq_len = 1024;
  c.rollout.max_new_tokens = 768;
  c.grpo.prompts_per_step = 32;
  c.grpo.group_size = 8;
  return c;
}

double total(const RunConfig& c) {
  double t = 0;
  for (const MemoryPart& p : estimate_memory(c, "train")) t += p.bytes;
  return t;
}

TEST(TrainMemory, RefusedWithTheKnobToTurn) {
  ::unsetenv("LOCAL_WORLD_SIZE");
  ::unsetenv("WORLD_SIZE");
  const double k64 = 64.0 * (1 << 30);
  RunConfig c = big_vocab_run();
  const std::string e = error_of([&] { preflight(c, "train", k64); });
  EXPECT_TRUE(has(e, "train: estimated memory") && has(e, "exceeds this machine's 64.0 GiB")) << e;
  EXPECT_TRUE(has(e, "largest part: logits and log-prob slices")) << e;
  EXPECT_TRUE(has(e, "raise grpo.minibatches or lower grpo.logprob_chunk_rows")) << e;
  // Every component is listed, and the report prints them.
  const std::string report = memory_report(estimate_memory(c, "train"));
  for (const char* part : {"FP32 master and AdamW moments", "gradients", "compute weights", "frozen reference policy",
                           "KV cache", "logits and log-prob slices", "activations kept for the backward"})
    EXPECT_TRUE(has(report, part)) << part << "\n" << report;
  // Chunks of 8 rows fit.
  RunConfig chunked = c;
  chunked.grpo.logprob_chunk_rows = 8;
  EXPECT_LT(total(chunked), total(c) / 10);
  EXPECT_EQ(error_of([&] { preflight(chunked, "train", k64); }), "<no UserError>");
  RunConfig more_minibatches = c;
  more_minibatches.grpo.minibatches = 32;
  EXPECT_EQ(error_of([&] { preflight(more_minibatches, "train", k64); }), "<no UserError>");
  // Without a reference (no KL penalty, no reference metrics) its weights are not counted.
  RunConfig no_ref = chunked;
  no_ref.grpo.ref_metrics_every = 0;
  EXPECT_LT(total(no_ref), total(chunked));
}

// A real model's context (Qwen2.5: 32768 positions) is far longer than its GRPO rows: the estimate
// follows the longest prompt the run keeps plus rollout.max_new_tokens, with logits over the
// completions only and each group's prompt once. Qwen2.5-0.5B's shape, 32 x 8 rows of <= 200 + 512
// tokens in chunks of 8 rows, fits 64 GiB; sized by the context it would not.
TEST(TrainMemory, SizedByTheLongestPromptNotTheContext) {
  ::unsetenv("LOCAL_WORLD_SIZE");
  ::unsetenv("WORLD_SIZE");
  const double k64 = 64.0 * (1 << 30);
  RunConfig c = big_vocab_run();
  c.model.max_seq_len = 32768;
  c.rollout.max_new_tokens = 512;
  c.grpo.minibatches = 4;
  c.grpo.logprob_chunk_rows = 8;
  c.grpo.ref_metrics_every = 1;  // a reference forward
  c.grpo.entropy_coef = 0;
  c.grpo.logprob_chunk_tokens = 256;
  EXPECT_EQ(error_of([&] { preflight(c, "train", k64, 200); }), "<no UserError>");
  const std::string e = error_of([&] { preflight(c, "train", k64); });
  EXPECT_TRUE(has(e, "model.max_seq_len - rollout.max_new_tokens (32256)")) << e;
  double with_prompt = 0, logits = 0;
  for (const MemoryPart& p : estimate_memory(c, "train", 200)) {
    with_prompt += p.bytes;
    if (has(p.what, "logits")) {
      logits = p.bytes;
      EXPECT_TRUE(has(p.keys, "rollout.max_new_tokens (512) x model.vocab_size (151936)")) << p.keys;
    }
  }
  // 8 rows per forward x 512 completion tokens x vocabulary x 4 bytes x (policy, its gradient,
  // the reference) + 3 log-softmax slices of 256 positions.
  const double rows_t_v4 = 8.0 * 512 * 151936 * 4;
  EXPECT_DOUBLE_EQ(logits, rows_t_v4 * 3 + rows_t_v4 / 2 * 3);
  EXPECT_LT(with_prompt * 3, total(c));
  // The longest prompt counts at most up to what the context leaves.
  EXPECT_DOUBLE_EQ(total(c), [&] {
    double t = 0;
    for (const MemoryPart& p : estimate_memory(c, "train", 1 << 20)) t += p.bytes;
    return t;
  }());
}

TEST(TrainMemory, RanksOnOneMachineShareIt) {
  RunConfig c = big_vocab_run();
  c.grpo.logprob_chunk_rows = 8;
  const double limit = total(c) * 2.5;
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_EQ(error_of([&] { preflight(c, "train", limit); }), "<no UserError>");
  ::setenv("LOCAL_WORLD_SIZE", "3", 1);
  const std::string e = error_of([&] { preflight(c, "train", limit); });
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_TRUE(has(e, "per rank x LOCAL_WORLD_SIZE 3")) << e;
}

// A GPU run is held to its GPU's free memory, which its rank does not share with the other ranks of
// the machine (each has a GPU of its own); the error names the device and its free and total memory.
TEST(TrainMemory, AGpuRunIsHeldToItsOwnGpu) {
  RunConfig c = big_vocab_run();
  c.grpo.logprob_chunk_rows = 8;
  const std::vector<MemoryPart> parts = estimate_memory(c, "train");
  const double limit = total(c) * 1.5;
  ::setenv("LOCAL_WORLD_SIZE", "3", 1);
  const std::string host = error_of([&] { check_memory(parts, host_memory_limit(limit), "train"); });
  EXPECT_TRUE(has(host, "per rank x LOCAL_WORLD_SIZE 3") && has(host, "exceeds this machine's")) << host;
  const MemoryLimit gpu{limit, "the free memory of cuda:1, 90.0 GiB of 140 GiB", 1};
  EXPECT_EQ(error_of([&] { check_memory(parts, gpu, "train"); }), "<no UserError>");
  ::unsetenv("LOCAL_WORLD_SIZE");
  const std::string e = error_of([&] { check_memory(parts, MemoryLimit{limit / 2, gpu.where, 1}, "train"); });
  EXPECT_TRUE(has(e, "exceeds the free memory of cuda:1, 90.0 GiB of 140 GiB; largest part: ")) << e;
}

TEST(TrainMemory, GpuFreeMemoryOnThisMachine) {
  if (cuda_device_count() == 0) {
    EXPECT_EQ(gpu_memory_limit(0).bytes, 0.0);  // unknown: preflight checks nothing
    GTEST_SKIP() << "no CUDA device: only the no-device answer is checked";
  }
  const MemoryLimit limit = gpu_memory_limit(0);
  EXPECT_GT(limit.bytes, 0.0);
  EXPECT_TRUE(has(limit.where, "the free memory of cuda:0, ")) << limit.where;
  RunConfig c = big_vocab_run();
  c.run.device = DeviceKind::cuda;
  c.model.n_layers = 24000;  // about 10 TiB of weights and optimizer state: no GPU holds it
  const std::string e = error_of([&] { preflight(c, "train"); });
  EXPECT_TRUE(has(e, "exceeds the free memory of cuda:0")) << e;
}

}  // namespace
}  // namespace unstuck
