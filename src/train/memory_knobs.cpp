// What lowers a run's memory, measured by its own plan: each change a refused run could make,
// applied alone to a copy of its config and planned again (memory_plan.h, memory_knobs()).
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/train/memory_plan.h"

namespace unstuck::train {
namespace {

int64_t world_of(const MemoryPlanInputs& in) {
  if (in.world_size > 0) return in.world_size;
  const char* w = std::getenv("WORLD_SIZE");
  const long long v = w ? std::atoll(w) : 1;
  return v > 0 ? int64_t(v) : 1;
}

// Whole prompt groups of every minibatch on each of `ranks` ranks (what validation asks of a run).
bool splits(const RunConfig& c, int64_t ranks, int64_t minibatches) {
  return c.grpo.prompts_per_step % (ranks * minibatches) == 0;
}

// One change: its name and what it does to a config.
struct Change {
  std::string name;
  std::function<void(RunConfig&)> apply;
};

// The changes that apply to `c` at `ranks` ranks, each leaving a valid config.
std::vector<Change> changes_of(const RunConfig& c, const MemoryPlanInputs& in, int64_t ranks) {
  std::vector<Change> out;
  const auto add = [&](const std::string& name, std::function<void(RunConfig&)> apply) {
    RunConfig changed = c;
    apply(changed);
    try {
      validate(changed);
    } catch (const UserError&) {
      return;  // this run cannot take it (e.g. LoRA with an FP8 mode)
    }
    out.push_back({name, std::move(apply)});
  };
  const precision::PrecisionMode mode = c.precision.mode;
  const bool fp8 = mode == precision::PrecisionMode::fp8_rn || mode == precision::PrecisionMode::fp8_sr;
  if (!c.lora.enabled()) add("lora.rank=16", [](RunConfig& x) { x.lora.rank = 16; });
  if (in.gpu && ranks == 1 && !c.lora.enabled() && mode != precision::PrecisionMode::fp32 && !fp8 &&
      c.precision.offload != precision::Offload::optimizer)
    add("precision.offload=optimizer", [](RunConfig& x) { x.precision.offload = precision::Offload::optimizer; });
  if (!c.model.activation_checkpointing)
    add("model.activation_checkpointing=true", [](RunConfig& x) { x.model.activation_checkpointing = true; });
  if (splits(c, ranks, 2 * c.grpo.minibatches)) {
    const int64_t m = 2 * c.grpo.minibatches;
    add("grpo.minibatches=" + std::to_string(m), [m](RunConfig& x) { x.grpo.minibatches = m; });
  }
  if (c.grpo.logprob_chunk_tokens <= 0 || c.grpo.logprob_chunk_tokens > 1) {
    const int64_t t = c.grpo.logprob_chunk_tokens > 0 ? c.grpo.logprob_chunk_tokens / 2 : 256;
    add("grpo.logprob_chunk_tokens=" + std::to_string(t), [t](RunConfig& x) { x.grpo.logprob_chunk_tokens = t; });
  }
  return out;
}

}  // namespace

std::vector<KnobPlan> memory_knobs(const RunConfig& c, const std::string& command, const MemoryPlanInputs& in) {
  std::vector<KnobPlan> out;
  if (command != "train") return out;
  const int64_t ranks = world_of(in);
  const auto plan_of = [&](const RunConfig& changed, int64_t at) {
    MemoryPlanInputs i = in;
    i.world_size = at;
    return plan_memory(changed, command, i);
  };
  const std::vector<Change> changes = changes_of(c, in, ranks);
  RunConfig all = c;
  std::string names;
  for (const Change& ch : changes) {
    RunConfig changed = c;
    ch.apply(changed);
    const MemoryPlan p = plan_of(changed, ranks);
    out.push_back({ch.name, p.peak(), p.host_bytes(), false});
    // Together: every change, but not the offload beside LoRA (an adapters' state stays on the
    // device).
    if (ch.name.rfind("precision.offload", 0) == 0 && all.lora.enabled()) continue;
    ch.apply(all);
    names += (names.empty() ? "" : ", ") + ch.name;
  }
  if (changes.size() > 1) {
    try {
      validate(all);
      const MemoryPlan p = plan_of(all, ranks);
      out.push_back({"all of " + names, p.peak(), p.host_bytes(), false});
    } catch (const UserError&) {
    }
  }
  for (const int64_t more : {2 * ranks, 8 * ranks})
    if (splits(c, more, c.grpo.minibatches)) {
      const MemoryPlan p = plan_of(c, more);
      out.push_back(
          {"WORLD_SIZE=" + std::to_string(more) + " (ranks on more machines)", p.peak(), p.host_bytes(), true});
    }
  return out;
}

}  // namespace unstuck::train
