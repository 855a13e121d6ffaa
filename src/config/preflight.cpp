// Pre-flight checks: cross-key limits that need the final model shape, and a memory estimate of
// the run's largest buffers against the machine's RAM, so an absurd size fails at start-up with
// the key's name instead of a std::bad_alloc (or an abort) minutes into the run.
#include "unstuck/config/preflight.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/config/device.h"

namespace unstuck {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

// A positive count from the environment (WORLD_SIZE, LOCAL_WORLD_SIZE), else 1.
int64_t env_count(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return 1;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end != v && *end == '\0' && n >= 1 ? n : 1;
}

// Parameters of the Llama layout (param_layout.cpp), in double.
double param_count(const model::ModelConfig& m) {
  const double dim = double(m.dim), hd = m.n_heads > 0 ? double(m.dim / m.n_heads) : 0.0;
  const double q = double(m.n_heads) * hd, kv = double(m.n_kv_heads) * hd;
  const double per_layer = 2 * dim + q * dim + 2 * kv * dim + dim * q + 3 * double(m.ffn_dim) * dim;
  return double(m.vocab_size) * dim * (m.tie_embeddings ? 1 : 2) + double(m.n_layers) * per_layer + dim;
}

std::string model_keys(const model::ModelConfig& m) {
  return "model.vocab_size (" + num(m.vocab_size) + "), model.dim (" + num(m.dim) + "), model.n_layers (" +
         num(m.n_layers) + "), model.ffn_dim (" + num(m.ffn_dim) + ")";
}

}  // namespace

std::vector<MemoryPart> estimate_memory(const RunConfig& c, const std::string& command, int64_t longest_prompt) {
  const model::ModelConfig& m = c.model;
  const double P = param_count(m), V = double(m.vocab_size), L = double(m.n_layers);
  const double kv_dim = m.n_heads > 0 ? double(m.n_kv_heads) * double(m.dim / m.n_heads) : 0.0;
  const double S = double(m.max_seq_len), T = double(c.rollout.max_new_tokens);
  // Prompt tokens of a GRPO row: the longest prompt kept, or all the context leaves (upper bound).
  const double Pp = longest_prompt >= 0 ? std::min(double(longest_prompt), std::max(0.0, S - T)) : std::max(0.0, S - T);
  const double row_len = Pp + T;
  const std::string prompt_keys = longest_prompt >= 0 ? "the longest prompt (" + num(int64_t(Pp)) + " tokens)"
                                                      : "model.max_seq_len - rollout.max_new_tokens (" +
                                                            num(int64_t(Pp)) + ")";
  std::vector<MemoryPart> parts;
  if (command != "train") {
    // Weights: eval holds the FP32 weights and a compute copy; SFT adds gradients, the AdamW moments
    // and the starting point: ~6 FP32 copies.
    parts.push_back({"weights and optimizer state", model_keys(m), P * 4 * (command == "eval" ? 2 : 6), ""});
  }
  if (command == "train") {
    // Per rank (GrpoTrainer): the ranks of WORLD_SIZE shard the master and moments and split the batch.
    const double W = double(env_count("WORLD_SIZE"));
    const double cb = c.precision.mode == precision::PrecisionMode::fp32 ? 4 : 2;  // compute dtype bytes
    // FP16 weights compute in FP32 on the CPU, and precision.compute: fp32 always does (DESIGN.md).
    const bool fp16 = c.precision.mode == precision::PrecisionMode::fp16 ||
                      c.precision.mode == precision::PrecisionMode::fp16_sr;
    // auto may resolve to fp32 at start-up: counted as fp32 (the larger of the two).
    const double fb = c.precision.compute != precision::ComputeMode::native || fp16 ? 4 : cb;  // forward dtype
    const std::string mk = model_keys(m);
    parts.push_back({"base weights as loaded (FP32)", mk, P * 4, ""});
    parts.push_back({"FP32 master and AdamW moments (this rank's shard)", mk, P * 4 * 3 / W,
                     "more ranks (WORLD_SIZE) shard them"});
    parts.push_back({"gradients (flat FP32 and per parameter)", mk, P * 4 * (1 + (W > 1 ? 1 / W : 0)) + P * fb, ""});
    parts.push_back({"compute weights, FP32 forward copy and two snapshots (metrics)", mk,
                     P * cb * 3 + (fb != cb ? P * fb : 0), ""});
    if (c.grpo.kl_coef > 0 || c.grpo.ref_metrics_every > 0)
      parts.push_back({"frozen reference policy (forward dtype)", mk, P * fb,
                       "grpo.ref_metrics_every: 0 with grpo.kl_coef: 0 keeps no reference"});
    const double N = double(c.grpo.prompts_per_step) * double(c.grpo.group_size), N_rank = std::ceil(N / W);
    const std::string batch = "grpo.prompts_per_step (" + num(c.grpo.prompts_per_step) + ") x grpo.group_size (" +
                              num(c.grpo.group_size) + ")";
    // Sampling uniforms of the whole batch (N, T) and this rank's KV cache (2 x layers x rows x row
    // length x kv_dim).
    parts.push_back({"rollout sampling buffers and KV cache",
                     "(rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ") + " + prompt_keys + ") x " + batch,
                     N * T * 4 + 2 * L * N_rank * row_len * kv_dim * fb,
                     "lower grpo.prompts_per_step or rollout.max_new_tokens"});
    // Rows per forward of the log-prob passes: a minibatch, or grpo.logprob_chunk_rows of it.
    double rows = std::ceil(N_rank / std::max<double>(1.0, double(c.grpo.minibatches)));
    std::string row_keys = batch + " / grpo.minibatches (" + num(c.grpo.minibatches) + ")";
    if (c.grpo.logprob_chunk_rows > 0 && double(c.grpo.logprob_chunk_rows) < rows) {
      rows = double(c.grpo.logprob_chunk_rows);
      row_keys = "grpo.logprob_chunk_rows (" + num(c.grpo.logprob_chunk_rows) + ")";
    }
    const std::string knob = "raise grpo.minibatches or lower grpo.logprob_chunk_rows (sequences per forward)";
    // Logits over the completions and their gradient, the reference's logits, and the
    // log-softmax slices of grpo.logprob_chunk_tokens positions (all T with the entropy bonus).
    const double slice = c.grpo.entropy_coef > 0 || c.grpo.logprob_chunk_tokens <= 0
                             ? T : std::min(T, double(c.grpo.logprob_chunk_tokens));
    const bool ref = c.grpo.kl_coef > 0 || c.grpo.ref_metrics_every > 0;
    parts.push_back({"logits and log-prob slices (rows per forward x completion x vocabulary)",
                     row_keys + " x rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ") x model.vocab_size (" +
                         num(m.vocab_size) + ")",
                     rows * T * V * 4 * (ref ? 3 : 2) + rows * slice * V * 4 * 3, knob});
    // Activations kept for the backward: about 8 of width dim + ffn_dim per token and layer; with
    // model.activation_checkpointing each layer's input, plus one layer's activations recomputed.
    // Tokens per forward: the rows' completions and each group's prompt once (the full rows when a
    // sliding window shorter than a row makes forward_completions fall back to them).
    const bool shared = !(m.sliding_window > 0 && double(m.sliding_window) < row_len);
    const double tokens = shared ? rows * T + std::ceil(rows / std::max(1.0, double(c.grpo.group_size))) * Pp
                                 : rows * row_len;
    const double per_layer = double(m.dim + m.ffn_dim) * fb * 8;
    parts.push_back({"activations kept for the backward",
                     row_keys + " x (rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ") + " + prompt_keys +
                         (shared ? " / grpo.group_size (" + num(c.grpo.group_size) + ")" : std::string()) +
                         ") x model.n_layers (" + num(m.n_layers) + ") x model.ffn_dim (" + num(m.ffn_dim) + ")" +
                         (m.activation_checkpointing ? " with model.activation_checkpointing" : ""),
                     m.activation_checkpointing ? tokens * (L * double(m.dim) * fb + per_layer) : tokens * L * per_layer,
                     m.activation_checkpointing ? knob : knob + ", or set model.activation_checkpointing: true"});
  } else if (command == "sft") {
    // Logits (B, S, V), their gradient and the cross-entropy's log-softmax; activations per layer
    // kept for backward (about 8 of width dim + ffn_dim per token and layer).
    const std::string batch = "sft.batch_size (" + num(c.sft.batch_size) + ") x model.max_seq_len (" +
                              num(m.max_seq_len) + ")";
    parts.push_back({"batch logits", batch + " x model.vocab_size (" + num(m.vocab_size) + ")",
                     double(c.sft.batch_size) * S * V * 4 * 3, "lower sft.batch_size"});
    parts.push_back({"batch activations", batch + " x model.n_layers (" + num(m.n_layers) + ") x model.ffn_dim (" +
                                              num(m.ffn_dim) + ")",
                     double(c.sft.batch_size) * S * L * double(m.dim + m.ffn_dim) * 4 * 8, "lower sft.batch_size"});
  }
  std::sort(parts.begin(), parts.end(), [](const MemoryPart& a, const MemoryPart& b) { return a.bytes > b.bytes; });
  return parts;
}

std::string memory_report(const std::vector<MemoryPart>& parts) {
  double total = 0;
  std::string out;
  for (const MemoryPart& p : parts) {
    total += p.bytes;
    out += "\n  " + format_bytes(p.bytes) + "  " + p.what;
  }
  return "estimated memory per rank " + format_bytes(total) + ":" + out;
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return physical_memory_bytes();
}

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, bytes >= 1e6 ? "%.3g %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

void check_limits(const RunConfig& c) {
  if (c.rollout.max_new_tokens >= c.model.max_seq_len)
    throw UserError("rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) +
                    ") must be < model.max_seq_len (" + num(c.model.max_seq_len) +
                    "): prompt and completion together must fit the model's context");
}

MemoryLimit host_memory_limit(double bytes) {
  // The ranks started on this machine (LOCAL_WORLD_SIZE) share its memory.
  return {bytes, "this machine's " + format_bytes(bytes), env_count("LOCAL_WORLD_SIZE")};
}

MemoryLimit gpu_memory_limit(int device) {
  double free = 0, total = 0;
  if (!cuda_memory(device, &free, &total)) return {0, "", 1};  // unknown: no check
  // Each rank has a GPU of its own (resolve_device refuses ranks sharing one).
  return {free, "the free memory of cuda:" + std::to_string(device) + ", " + format_bytes(free) + " of " +
                    format_bytes(total),
          1};
}

void check_memory(const std::vector<MemoryPart>& parts, const MemoryLimit& limit, const std::string& command) {
  if (limit.bytes <= 0 || parts.empty()) return;  // unknown size: nothing to compare against
  double total = 0;
  for (const MemoryPart& p : parts) total += p.bytes;
  if (total * double(limit.ranks) <= limit.bytes) return;
  const MemoryPart& big = parts.front();
  throw UserError(command + ": estimated memory " + format_bytes(total * double(limit.ranks)) +
                  (limit.ranks > 1 ? " (" + format_bytes(total) + " per rank x LOCAL_WORLD_SIZE " + num(limit.ranks) + ")"
                                   : std::string()) +
                  " exceeds " + limit.where + "; largest part: " + big.what + ", " + format_bytes(big.bytes) +
                  ", sized by " + big.keys + " (" + (big.knob.empty() ? "lower it" : big.knob) + ")");
}

void preflight(const RunConfig& c, const std::string& command, double limit_bytes, int64_t longest_prompt) {
  check_limits(c);
  // Given bytes of host memory, or this rank's device: its GPU's free memory, else the host's available memory.
  const ResolvedDevice d = limit_bytes < 0 ? rank_device(c) : ResolvedDevice{};
  const MemoryLimit limit = limit_bytes >= 0            ? host_memory_limit(limit_bytes)
                            : d.kind == DeviceKind::cuda ? gpu_memory_limit(d.index)
                                                         : host_memory_limit(available_memory_bytes());
  check_memory(estimate_memory(c, command, longest_prompt), limit, command);
}

}  // namespace unstuck
