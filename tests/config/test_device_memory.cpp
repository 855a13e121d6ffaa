// run.device resolution (cpu, auto, cuda without a device, LOCAL_RANK beyond the devices) and the
// GRPO memory pre-flight: a config that cannot fit is refused naming the knob to turn, the log-prob
// row chunk lowers the estimate, the ranks of LOCAL_WORLD_SIZE share the machine's memory, and a GPU
// run is held to its own GPU's free memory.
#include <gtest/gtest.h>

#include <iostream>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unistd.h>

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/config/device.h"
#include "unstuck/config/run_config.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/train/memory_plan.h"

namespace unstuck::train {
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

double total(const RunConfig& c) { return plan_memory(c, "train").peak(); }

// What a run's plan checks before step 1 (train/run_plan.cpp): the context's limits, then the memory
// plan against `limit` (LOCAL_WORLD_SIZE ranks sharing the host's `bytes`, or this rank's device).
void check_plan(const RunConfig& c, const MemoryLimit& limit, const MemoryPlanInputs& in = {}) {
  check_limits(c);
  check_memory(plan_memory(c, "train", in), limit);
}

double part_bytes(const MemoryPlan& plan, const std::string& what) {
  for (const MemoryPart& p : plan.parts)
    if (has(p.what, what)) return p.bytes;
  return -1;
}

TEST(TrainMemory, RefusedWithTheKnobToTurn) {
  ::unsetenv("LOCAL_WORLD_SIZE");
  ::unsetenv("WORLD_SIZE");
  const double k64 = 64.0 * (1 << 30);
  RunConfig c = big_vocab_run();
  const std::string e = error_of([&] { check_plan(c, host_memory_limit(k64)); });
  EXPECT_TRUE(has(e, "train: planned peak memory") && has(e, "(update) exceeds this machine's 64.0 GiB")) << e;
  EXPECT_TRUE(has(e, "largest part: activations kept for the backward")) << e;
  EXPECT_TRUE(has(e, "raise grpo.minibatches or lower grpo.logprob_chunk_rows")) << e;
  EXPECT_TRUE(has(e, "or set model.activation_checkpointing: true")) << e;
  // The refusal carries the whole breakdown, every component of the plan with its phase.
  const std::string report = memory_report(plan_memory(c, "train"));
  EXPECT_TRUE(has(e, report)) << e;
  for (const char* part : {"FP32 master weights", "AdamW moments", "flat FP32 gradient", "frozen reference policy",
                           "KV cache of the rollout", "LM head slice", "activations kept for the backward",
                           "rollout: peak", "update: peak", "evaluation: peak", "load: peak"})
    EXPECT_TRUE(has(report, part)) << part << "\n" << report;
  // Chunks of 8 rows fit.
  RunConfig chunked = c;
  chunked.grpo.logprob_chunk_rows = 8;
  EXPECT_LT(total(chunked), total(c) / 10);
  // Checkpointing keeps each layer's input only.
  RunConfig checkpointed = c;
  checkpointed.model.activation_checkpointing = true;
  EXPECT_LT(part_bytes(plan_memory(checkpointed, "train"), "activations kept"),
            part_bytes(plan_memory(c, "train"), "activations kept") / 5);
  EXPECT_EQ(error_of([&] { check_plan(chunked, host_memory_limit(k64)); }), "<no UserError>");
  RunConfig more_minibatches = c;
  more_minibatches.grpo.minibatches = 32;
  EXPECT_EQ(error_of([&] { check_plan(more_minibatches, host_memory_limit(k64)); }), "<no UserError>");
  // Without a reference (no KL penalty, no reference metrics) its weights are not counted.
  RunConfig no_ref = chunked;
  no_ref.grpo.ref_metrics_every = 0;
  EXPECT_LT(total(no_ref), total(chunked));
}

// The trainable state names the knobs that work on one machine, not only more ranks: LoRA for every
// part, precision.offload on a GPU for the master and moments (16-bit modes), a 16-bit mode for
// FP32; and with several ranks the plan counts the copy of this rank's compute-weight shard that
// each optimizer step sends to the all-gather.
TEST(TrainMemory, TheStateNamesTheKnobsOfOneMachine) {
  ::unsetenv("WORLD_SIZE");
  const auto knob_of = [](const MemoryPlan& plan, const std::string& what) {
    for (const MemoryPart& p : plan.parts)
      if (has(p.what, what)) return p.knob;
    return std::string("<no part '") + what + "'>";
  };
  RunConfig c = big_vocab_run();
  c.precision.mode = precision::PrecisionMode::bf16_sr;
  MemoryPlanInputs gpu;
  gpu.gpu = true;
  const MemoryPlan on_gpu = plan_memory(c, "train", gpu);
  for (const char* part : {"FP32 master weights", "AdamW moments"}) {
    const std::string k = knob_of(on_gpu, part);
    EXPECT_TRUE(has(k, "more ranks (WORLD_SIZE)") && has(k, "precision.offload: optimizer") && has(k, "lora.rank > 0"))
        << part << ": " << k;
  }
  EXPECT_TRUE(has(knob_of(on_gpu, "flat FP32 gradient"), "lora.rank > 0"));
  // On the CPU the host is the device: offloading saves nothing and is not suggested.
  EXPECT_FALSE(has(knob_of(plan_memory(c, "train"), "AdamW moments"), "precision.offload"));
  RunConfig fp32 = c;
  fp32.precision.mode = precision::PrecisionMode::fp32;
  const std::string master = knob_of(plan_memory(fp32, "train"), "FP32 master weights (also the compute weights)");
  EXPECT_TRUE(has(master, "lora.rank > 0") && has(master, "a 16-bit precision.mode")) << master;
  // LoRA's own state: no LoRA knob.
  RunConfig lora = c;
  lora.lora.rank = 8;
  EXPECT_FALSE(has(knob_of(plan_memory(lora, "train"), "AdamW moments"), "lora.rank"));
  // Two ranks: the shard copy of the optimizer step, A x 2 bytes / 2.
  ::setenv("WORLD_SIZE", "2", 1);
  const MemoryPlan two = plan_memory(c, "train");
  ::unsetenv("WORLD_SIZE");
  EXPECT_GT(part_bytes(two, "this rank's shard of the compute weights, copied for the all-gather"), 0);
  EXPECT_LT(part_bytes(plan_memory(c, "train"), "copied for the all-gather"), 0);  // one rank: no such part
}

// A refused run lists what each change would give, planned again: the numbers are the plans of the
// changed configs, those that fit say so, and changes the run cannot take are left out.
TEST(TrainMemory, ARefusalListsThePeakEachChangeWouldGive) {
  ::unsetenv("WORLD_SIZE");
  RunConfig c = big_vocab_run();
  c.precision.mode = precision::PrecisionMode::bf16_sr;
  MemoryPlanInputs gpu;
  gpu.gpu = true;
  const MemoryPlan plan = plan_memory(c, "train", gpu);
  const std::vector<KnobPlan> knobs = memory_knobs(c, "train", gpu);
  const auto peak_of = [&](const std::string& change) {
    for (const KnobPlan& k : knobs)
      if (k.change == change) return k.peak;
    return -1.0;
  };
  RunConfig lora = c;
  lora.lora.rank = 16;
  EXPECT_DOUBLE_EQ(peak_of("lora.rank=16"), plan_memory(lora, "train", gpu).peak());
  RunConfig ac = c;
  ac.model.activation_checkpointing = true;
  EXPECT_DOUBLE_EQ(peak_of("model.activation_checkpointing=true"), plan_memory(ac, "train", gpu).peak());
  RunConfig mb = c;
  mb.grpo.minibatches = 2;
  EXPECT_DOUBLE_EQ(peak_of("grpo.minibatches=2"), plan_memory(mb, "train", gpu).peak());
  EXPECT_GT(peak_of("precision.offload=optimizer"), 0);  // a GPU, bf16_sr, one rank
  MemoryPlanInputs eight = gpu;
  eight.world_size = 8;
  EXPECT_DOUBLE_EQ(peak_of("WORLD_SIZE=8 (ranks on more machines)"), plan_memory(c, "train", eight).peak());
  for (const KnobPlan& k : knobs) EXPECT_LT(k.peak, plan.peak()) << k.change;
  // Together the single-machine changes give less than any one of them.
  double together = -1;
  for (const KnobPlan& k : knobs)
    if (k.change.rfind("all of ", 0) == 0) together = k.peak;
  EXPECT_GT(together, 0);
  for (const KnobPlan& k : knobs)
    if (!k.more_machines && k.change.rfind("all of ", 0) != 0) EXPECT_LT(together, k.peak) << k.change;
  // Between the plan and the best change: the refusal names both kinds.
  const double best = std::min(peak_of("lora.rank=16"), peak_of("model.activation_checkpointing=true"));
  const MemoryLimit limit{(best + plan.peak()) / 2, "this GPU's free memory", 1};
  const std::string e = error_of([&] { check_memory(plan, limit, [&] { return knobs; }); });
  EXPECT_TRUE(has(e, "what one change would give (planned peak per rank;")) << e;
  const std::size_t list = e.find("what one change"), report = e.find("\n", e.find("WORLD_SIZE=8", list));
  std::cout << e.substr(0, e.find('\n')).substr(0, 160) << "...\n" << e.substr(list, report - list) << "\n";
  EXPECT_TRUE(has(e, "\n  lora.rank=16: ")) << e;
  EXPECT_TRUE(has(e, " - fits")) << e;
  EXPECT_TRUE(has(e, "\n  all of lora.rank=16, ")) << e;
  // On the CPU no offload is offered; a 12-prompt batch does not split over 16 ranks of 2.
  RunConfig odd = c;
  odd.grpo.prompts_per_step = 12;
  for (const KnobPlan& k : memory_knobs(odd, "train", {})) {
    EXPECT_NE(k.change, "precision.offload=optimizer");
    EXPECT_NE(k.change, "WORLD_SIZE=8 (ranks on more machines)");
  }
}

// `unstuck config plan`: a model's config.json (no weights) at several world sizes on GPUs: each
// row is the plan of the run config with that model shape at that world size (the same numbers as
// plan_memory in-process), its peak against --gpu-memory; a bad --world-size is named.
TEST(TrainMemory, ConfigPlanPrintsThePlanPerRankForAModelShape) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("unstuck_config_plan_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  RunConfig shape = big_vocab_run();
  shape.model.family = model::Family::qwen2;
  shape.model.qkv_bias = true;
  shape.model.tie_embeddings = true;
  std::ofstream(dir / "config.json") << model::hf_config_json(shape.model, {}, "bfloat16").dump();
  const std::string config = std::string(UNSTUCK_SOURCE_DIR) + "/configs/grpo/countdown.yaml";
  const auto run = [&](const std::string& args, int* code) {
    const std::string cmd = std::string(UNSTUCK_BINARY) + " config plan --config " + config + " --model " +
                            dir.string() + " " + args + " > " + (dir / "out.txt").string() + " 2>&1";
    *code = WEXITSTATUS(std::system(cmd.c_str()));
    std::ifstream in(dir / "out.txt");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  int code = -1;
  const std::string out =
      run("--world-size 1,4 --gpu-memory 20GB --prompt-tokens 100 --json precision.mode=bf16_sr", &code);
  ASSERT_EQ(code, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  RunConfig c = load_run_config(config, {"precision.mode=bf16_sr"});
  const bool checkpointing = c.model.activation_checkpointing;
  c.model = model::read_hf_config(dir / "config.json").model;
  c.model.activation_checkpointing = checkpointing;
  ASSERT_EQ(j["plans"].size(), 2u);
  for (const nlohmann::json& row : j["plans"]) {
    MemoryPlanInputs in;
    in.gpu = true;
    in.longest_prompt = 100;
    in.world_size = row["world_size"].get<int64_t>();
    const MemoryPlan p = plan_memory(c, "train", in);
    EXPECT_DOUBLE_EQ(row["peak_bytes"].get<double>(), p.peak()) << row;
    EXPECT_DOUBLE_EQ(row["held_bytes"].get<double>(), p.held()) << row;
    EXPECT_EQ(row["peak_phase"], p.peak_phase()) << row;
    EXPECT_EQ(row["fits"].get<bool>(), p.peak() <= 20e9) << row;
  }
  EXPECT_LT(j["plans"][1]["held_bytes"].get<double>(), j["plans"][0]["held_bytes"].get<double>());  // sharded
  const std::string text = run("--world-size 2 --gpu-memory 1GB", &code);
  EXPECT_EQ(code, 0) << text;
  EXPECT_TRUE(has(text, "world size 2: peak ") && has(text, "does not fit")) << text;
  const std::string bad = run("--world-size 1,0", &code);
  EXPECT_EQ(code, 2) << bad;
  EXPECT_TRUE(has(bad, "--world-size takes counts of at least 1 separated by commas, got '1,0'")) << bad;
  std::filesystem::remove_all(dir);
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
  EXPECT_EQ(error_of([&] { check_plan(c, host_memory_limit(k64), MemoryPlanInputs{200}); }), "<no UserError>");
  const std::string e = error_of([&] { check_plan(c, host_memory_limit(k64)); });
  EXPECT_TRUE(has(e, "model.max_seq_len - rollout.max_new_tokens (32256)")) << e;
  MemoryPlanInputs in;
  in.longest_prompt = 200;
  const MemoryPlan with_prompt = plan_memory(c, "train", in);
  // The fused head holds one slice of 8 rows x 256 positions: its logits (BF16 forward), their FP32
  // log-softmax and, in the backward, the recomputed logits and their gradient.
  ASSERT_EQ(c.precision.mode, precision::PrecisionMode::bf16_sr);
  ASSERT_EQ(c.precision.compute, precision::ComputeMode::native);
  EXPECT_DOUBLE_EQ(part_bytes(with_prompt, "LM head slice:"), 8.0 * 256 * 151936 * (2 * 2 + 12));
  for (const MemoryPart& p : with_prompt.parts)
    if (has(p.what, "LM head slice:"))
      EXPECT_TRUE(has(p.keys, "grpo.logprob_chunk_rows (8) x min(grpo.logprob_chunk_tokens (256)")) << p.keys;
  EXPECT_LT(with_prompt.peak() * 3, total(c));
  // The longest prompt counts at most up to what the context leaves.
  in.longest_prompt = 1 << 20;
  EXPECT_DOUBLE_EQ(total(c), plan_memory(c, "train", in).peak());
}

TEST(TrainMemory, RanksOnOneMachineShareIt) {
  RunConfig c = big_vocab_run();
  c.grpo.logprob_chunk_rows = 8;
  const double limit = total(c) * 2.5;
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_EQ(error_of([&] { check_plan(c, host_memory_limit(limit)); }), "<no UserError>");
  ::setenv("LOCAL_WORLD_SIZE", "3", 1);
  const std::string e = error_of([&] { check_plan(c, host_memory_limit(limit)); });
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_TRUE(has(e, "per rank x LOCAL_WORLD_SIZE 3")) << e;
}

// A GPU run is held to its GPU's free memory, which its rank does not share with the other ranks of
// the machine (each has a GPU of its own); the error names the device and its free and total memory.
TEST(TrainMemory, AGpuRunIsHeldToItsOwnGpu) {
  RunConfig c = big_vocab_run();
  c.grpo.logprob_chunk_rows = 8;
  const MemoryPlan parts = plan_memory(c, "train");
  const double limit = total(c) * 1.5;
  ::setenv("LOCAL_WORLD_SIZE", "3", 1);
  const std::string host = error_of([&] { check_memory(parts, host_memory_limit(limit)); });
  EXPECT_TRUE(has(host, "per rank x LOCAL_WORLD_SIZE 3") && has(host, "exceeds this machine's")) << host;
  const MemoryLimit gpu{limit, "the free memory of cuda:1, 90.0 GiB of 140 GiB", 1};
  EXPECT_EQ(error_of([&] { check_memory(parts, gpu); }), "<no UserError>");
  ::unsetenv("LOCAL_WORLD_SIZE");
  const std::string e = error_of([&] { check_memory(parts, MemoryLimit{limit / 2, gpu.where, 1}); });
  EXPECT_TRUE(has(e, "exceeds the free memory of cuda:1, 90.0 GiB of 140 GiB; largest part: ")) << e;
}

// The plan's arithmetic: what is held all run is counted once, phases replace each other, the load
// comes before the optimizer state exists, and each precision holds the buffers it allocates
// (TrainableWeights): FP32 shares the master with the compute weights, BF16 adds a 16-bit copy,
// FP16 on the CPU an FP32 forward copy beside it, and the reference is in the forward dtype.
TEST(TrainMemory, PhasesAndPrecisions) {
  ::unsetenv("WORLD_SIZE");
  RunConfig c = big_vocab_run();
  c.grpo.logprob_chunk_rows = 4;
  c.precision.compute = precision::ComputeMode::native;
  c.model.tie_embeddings = true;  // Qwen2.5-0.5B's layout
  c.model.qkv_bias = true;
  MemoryPlanInputs in;
  in.longest_prompt = 100;
  in.baseline_bytes = 3e8;
  c.precision.mode = precision::PrecisionMode::bf16_sr;
  const MemoryPlan bf = plan_memory(c, "train", in);
  const double P = part_bytes(bf, "FP32 master weights") / 4;
  EXPECT_NEAR(P, 494032768, 1);  // Qwen2.5-0.5B: 494,032,768 parameters
  double held = in.baseline_bytes;
  for (const MemoryPart& p : bf.parts) held += p.phase.empty() ? p.bytes : 0;
  EXPECT_DOUBLE_EQ(bf.held(), held);
  double best = held;
  for (const std::string& ph : bf.phases()) {
    const double peak = ph == "load" ? in.baseline_bytes + bf.phase_bytes(ph) : held + bf.phase_bytes(ph);
    EXPECT_DOUBLE_EQ(bf.phase_peak(ph), peak) << ph;
    best = std::max(best, peak);
  }
  EXPECT_DOUBLE_EQ(bf.peak(), best);
  EXPECT_DOUBLE_EQ(bf.phase_peak("load"), in.baseline_bytes + P * 4 + P * 4);  // file size unknown: FP32
  EXPECT_DOUBLE_EQ(part_bytes(bf, "AdamW moments"), P * 8);
  EXPECT_DOUBLE_EQ(part_bytes(bf, "compute weights (16-bit)"), P * 2);
  EXPECT_DOUBLE_EQ(part_bytes(bf, "frozen reference policy"), P * 2);
  EXPECT_LT(part_bytes(bf, "FP32 forward copy"), 0);
  c.precision.mode = precision::PrecisionMode::fp32;
  const MemoryPlan f32 = plan_memory(c, "train", in);
  EXPECT_DOUBLE_EQ(part_bytes(f32, "FP32 master weights (also the compute weights)"), P * 4);
  EXPECT_LT(part_bytes(f32, "compute weights (16-bit)"), 0);
  EXPECT_DOUBLE_EQ(part_bytes(f32, "frozen reference policy"), P * 4);
  c.precision.mode = precision::PrecisionMode::fp16;
  const MemoryPlan f16 = plan_memory(c, "train", in);
  EXPECT_DOUBLE_EQ(part_bytes(f16, "FP32 forward copy"), P * 4);
  // Two ranks shard the master and the moments and add a reduced gradient shard.
  ::setenv("WORLD_SIZE", "2", 1);
  c.precision.mode = precision::PrecisionMode::bf16_sr;
  const MemoryPlan two = plan_memory(c, "train", in);
  ::unsetenv("WORLD_SIZE");
  EXPECT_DOUBLE_EQ(part_bytes(two, "AdamW moments"), P * 4);
  EXPECT_DOUBLE_EQ(part_bytes(two, "flat FP32 gradient and this rank's reduced shard"), P * 6);
  // Each rank writes its own shard of the checkpoint from its buffers: nothing is gathered.
  EXPECT_DOUBLE_EQ(two.phase_bytes("checkpoint"), 0);
}

// precision.offload: optimizer on a GPU moves the FP32 master and the AdamW moments (12 bytes per
// parameter) out of the device's plan into host memory, which is planned and reported apart, as is
// every GPU run's load (on the host); on the CPU the same parts stay in the one plan.
TEST(TrainMemory, OffloadMovesTheOptimizerStateToTheHost) {
  ::unsetenv("WORLD_SIZE");
  RunConfig c = big_vocab_run();
  c.grpo.logprob_chunk_rows = 4;
  c.precision.mode = precision::PrecisionMode::bf16_sr;
  MemoryPlanInputs in;
  in.longest_prompt = 100;
  in.gpu = true;
  const MemoryPlan none = plan_memory(c, "train", in);
  c.precision.offload = precision::Offload::optimizer;
  const MemoryPlan off = plan_memory(c, "train", in);
  const double P = part_bytes(none, "FP32 master weights") / 4;
  // On a GPU the load is host memory (the FP32 buffer and the mapped files, FP32-sized when the
  // files' size is not given); the device holds nothing until the trainer moves the weights there;
  // and a checkpoint copies this rank's master and moments to the host to write them (12 P at one
  // rank): the host's peak is the larger of the two phases.
  EXPECT_DOUBLE_EQ(part_bytes(none, "FP32 weights being loaded") + part_bytes(none, "base model files, mapped"), P * 8);
  EXPECT_DOUBLE_EQ(part_bytes(none, "this rank's FP32 master and moments copied to the host (checkpoint)"), P * 12);
  EXPECT_DOUBLE_EQ(none.host_bytes(), P * 12);
  EXPECT_DOUBLE_EQ(none.phase_peak("load"), 0);
  EXPECT_DOUBLE_EQ(none.held() - off.held(), P * 12);
  // The master and moments, plus the files at load, plus the bounded staging slices.
  EXPECT_GE(off.host_bytes(), P * 12 + P * 4);
  EXPECT_LT(off.host_bytes(), P * 12 + P * 4 + 64.0 * (1 << 20));
  EXPECT_DOUBLE_EQ(off.phase_peak("load"), 0);
  const std::string report = memory_report(off);
  EXPECT_TRUE(has(report, "host memory (a GPU run's load; precision.offload's state): peak ") &&
              has(report, "AdamW moments (host"))
      << report;
  in.gpu = false;
  const MemoryPlan cpu = plan_memory(c, "train", in);
  EXPECT_EQ(cpu.host_bytes(), 0);
  EXPECT_GE(cpu.held(), none.held());  // the same parts plus the staging slices
}

TEST(TrainMemory, GpuFreeMemoryOnThisMachine) {
  if (cuda_device_count() == 0) {
    EXPECT_EQ(gpu_memory_limit(0).bytes, 0.0);  // unknown: the plan checks nothing
    GTEST_SKIP() << "no CUDA device: only the no-device answer is checked";
  }
  const MemoryLimit limit = gpu_memory_limit(0);
  EXPECT_GT(limit.bytes, 0.0);
  EXPECT_TRUE(has(limit.where, "the free memory of cuda:0, ")) << limit.where;
  RunConfig c = big_vocab_run();
  c.run.device = DeviceKind::cuda;
  c.model.n_layers = 24000;  // about 10 TiB of weights and optimizer state: no GPU holds it
  const std::string e = error_of([&] { check_plan(c, device_memory_limit(rank_device(c))); });
  EXPECT_TRUE(has(e, "exceeds the free memory of cuda:0")) << e;
}

}  // namespace
}  // namespace unstuck::train
