// Pre-flight checks: cross-key limits that need the final model shape, and a memory estimate of
// the run's largest buffers against the machine's RAM, so an absurd size fails at start-up with
// the key's name instead of a std::bad_alloc (or an abort) minutes into the run.
#include "unstuck/config/preflight.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "unstuck/common/error.h"

namespace unstuck {
namespace {

std::string num(int64_t v) { return std::to_string(v); }

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

std::vector<MemoryPart> estimate_memory(const RunConfig& c, const std::string& command) {
  const model::ModelConfig& m = c.model;
  const double P = param_count(m), V = double(m.vocab_size), L = double(m.n_layers);
  const double kv_dim = m.n_heads > 0 ? double(m.n_kv_heads) * double(m.dim / m.n_heads) : 0.0;
  const double S = double(m.max_seq_len), T = double(c.rollout.max_new_tokens);
  std::vector<MemoryPart> parts;
  // Weights: eval holds the FP32 weights and a compute copy; training adds gradients, the AdamW
  // moments, the starting point and (GRPO) the frozen reference: ~9 FP32 copies.
  const double weight_copies = command == "eval" ? 2 : command == "sft" ? 6 : 9;
  parts.push_back({"weights and optimizer state", model_keys(m), P * 4 * weight_copies});
  if (command == "train") {
    const double N = double(c.grpo.prompts_per_step) * double(c.grpo.group_size);
    const std::string batch = "grpo.prompts_per_step (" + num(c.grpo.prompts_per_step) + ") x grpo.group_size (" +
                              num(c.grpo.group_size) + ")";
    // Sampling uniforms (N, T) and the KV cache (2 x layers x N x S x kv_dim), FP32.
    parts.push_back({"rollout sampling buffers and KV cache",
                     "rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ") x " + batch,
                     N * T * 4 + 2 * L * N * std::min(S, T + S) * kv_dim * 4});
    // Log-probabilities over the vocabulary at every completion position, (N, T, V): the policy's
    // and the reference's, their exponentials and the gradient.
    const double rows = N / std::max<double>(1.0, double(c.grpo.minibatches));
    parts.push_back({"completion log-probabilities (rows x completion tokens x vocabulary)",
                     "rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ") x " + batch +
                         " x model.vocab_size (" + num(m.vocab_size) + ")",
                     N * T * V * 4 * 4 + rows * T * V * 4 * 3});
  } else if (command == "sft") {
    // Logits (B, S, V), their gradient and the cross-entropy's log-softmax; activations per layer
    // kept for backward (about 8 of width dim + ffn_dim per token and layer).
    const std::string batch = "sft.batch_size (" + num(c.sft.batch_size) + ") x model.max_seq_len (" +
                              num(m.max_seq_len) + ")";
    parts.push_back({"batch logits", batch + " x model.vocab_size (" + num(m.vocab_size) + ")",
                     double(c.sft.batch_size) * S * V * 4 * 3});
    parts.push_back({"batch activations", batch + " x model.n_layers (" + num(m.n_layers) + ") x model.ffn_dim (" +
                                              num(m.ffn_dim) + ")",
                     double(c.sft.batch_size) * S * L * double(m.dim + m.ffn_dim) * 4 * 8});
  }
  std::sort(parts.begin(), parts.end(), [](const MemoryPart& a, const MemoryPart& b) { return a.bytes > b.bytes; });
  return parts;
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

void preflight(const RunConfig& c, const std::string& command, double limit_bytes) {
  if (c.rollout.max_new_tokens >= c.model.max_seq_len)
    throw UserError("rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) +
                    ") must be < model.max_seq_len (" + num(c.model.max_seq_len) +
                    "): prompt and completion together must fit the model's context");
  if (limit_bytes < 0) limit_bytes = physical_memory_bytes();
  if (limit_bytes <= 0) return;  // unknown machine size: nothing to compare against
  const std::vector<MemoryPart> parts = estimate_memory(c, command);
  double total = 0;
  for (const MemoryPart& p : parts) total += p.bytes;
  if (total <= limit_bytes) return;
  const MemoryPart& big = parts.front();
  throw UserError(command + ": estimated memory " + format_bytes(total) + " exceeds this machine's " +
                  format_bytes(limit_bytes) + "; largest part: " + big.what + ", " + format_bytes(big.bytes) +
                  ", sized by " + big.keys + " (lower it)");
}

}  // namespace unstuck
