// The memory plan and pre-flight checks: cross-key limits that need the final model shape, and the
// run's memory by part against the device's, so an absurd size fails at start-up with the key's name
// instead of a std::bad_alloc (or an abort) minutes into the run.
#include "unstuck/train/memory_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "unstuck/common/cuda_info.h"
#include "unstuck/common/error.h"
#include "unstuck/common/memory_usage.h"
#include "unstuck/config/device.h"
#include "unstuck/model/param_layout.h"

namespace unstuck::train {
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

// Parameters of the Llama layout (param_layout.cpp), in double: embedding (and an untied head),
// per layer two norms, q/k/v (with their biases and Qwen3's q/k norms), o (with its bias) and the
// SwiGLU matrices, and the final norm.
double param_count(const model::ModelConfig& m) {
  const double dim = double(m.dim), hd = double(m.head_dim());
  const double q = double(m.n_heads) * hd, kv = double(m.n_kv_heads) * hd;
  const double per_layer = 2 * dim + q * dim + 2 * kv * dim + dim * q + 3 * double(m.ffn_dim) * dim +
                           (m.qkv_bias ? q + 2 * kv : 0) + (m.o_bias ? dim : 0) + (m.qk_norm ? 2 * hd : 0);
  return double(m.vocab_size) * dim * (m.tie_embeddings ? 1 : 2) + double(m.n_layers) * per_layer + dim;
}

// Elements of the LoRA adapters (model/lora.h's lora_layout): per layer and target an A (r, in) and
// a B (out, r), each aligned to kParamAlign.
double lora_param_count(const model::ModelConfig& m, const model::LoraConfig& l) {
  const double dim = double(m.dim), q = double(m.n_heads) * double(m.head_dim()),
               kv = double(m.n_kv_heads) * double(m.head_dim()), f = double(m.ffn_dim), r = double(l.rank);
  const auto aligned = [](double n) { return std::ceil(n / double(model::kParamAlign)) * double(model::kParamAlign); };
  double per_layer = 0;
  for (const std::string& t : l.target_modules) {
    const double in = t == "o_proj" ? q : t == "down_proj" ? f : dim;
    const double out = t == "q_proj"                       ? q
                       : t == "k_proj" || t == "v_proj"    ? kv
                       : t == "o_proj" || t == "down_proj" ? dim
                                                           : f;
    per_layer += aligned(r * in) + aligned(out * r);
  }
  return double(m.n_layers) * per_layer;
}

std::string model_keys(const model::ModelConfig& m) {
  return "model.vocab_size (" + num(m.vocab_size) + "), model.dim (" + num(m.dim) + "), model.n_layers (" +
         num(m.n_layers) + "), model.ffn_dim (" + num(m.ffn_dim) + ")";
}

// Bytes of activations one layer keeps for the backward per token in dtype bytes `fb`: the two
// norms' inputs and outputs, q/k/v before and after RoPE, the attention output, the gate/up
// projection, SiLU(gate) and its product with up (the down projection's input). Calibrated against
// the measured peaks of tests/train/test_memory_plan.cpp.
double layer_activation_bytes(const model::ModelConfig& m, double fb) {
  const double dim = double(m.dim), q = double(m.n_heads) * double(m.head_dim()),
               kv = double(m.n_kv_heads) * double(m.head_dim()), f = double(m.ffn_dim);
  return (4 * dim + 2 * (q + 2 * kv) + q + 4 * f) * fb;
}

// Elements of TrainableWeights' optimizer slices (kSliceElems): the scratch copy of the compute
// weights and the per-slice statistics.
constexpr double kSliceElems = double(1 << 22);

void sort_largest_first(std::vector<MemoryPart>& parts) {
  std::stable_sort(parts.begin(), parts.end(), [](const MemoryPart& a, const MemoryPart& b) {
    if (a.phase.empty() != b.phase.empty()) return a.phase.empty();
    return a.phase == b.phase && a.bytes > b.bytes;
  });
}

// The sizes, key names and knobs train_parts' parts are made of.
struct TrainShape {
  double P, V, L, D, kv_dim, S, T;
  double Pp, row_len;  // prompt tokens of a GRPO row (the longest prompt kept, or all the context leaves), a row
  double W;            // ranks (WORLD_SIZE): they shard the master and moments and split the batch
  double cb, fb;       // compute and forward dtype bytes
  double A;            // trainable elements: every parameter, or with LoRA the adapters
  double N, N_rank, prompts_rank;  // rows of the batch, of this rank, and this rank's prompts
  bool fp32, lora, offload, ref, pissa;
  std::string prompt_keys, adapters_knob, shard_knob, mk, what, batch, rows_knob;
};

std::string joined_knobs(const std::vector<std::string>& knobs) {
  std::string out;
  for (const std::string& k : knobs)
    if (!k.empty()) out += (out.empty() ? "" : ", or ") + k;
  return out;
}

TrainShape train_shape(const RunConfig& c, const MemoryPlanInputs& in) {
  const model::ModelConfig& m = c.model;
  TrainShape s;
  s.P = param_count(m), s.V = double(m.vocab_size), s.L = double(m.n_layers), s.D = double(m.dim);
  s.kv_dim = double(m.n_kv_heads) * double(m.head_dim());
  s.S = double(m.max_seq_len), s.T = double(c.rollout.max_new_tokens);
  s.Pp =
      in.longest_prompt >= 0 ? std::min(double(in.longest_prompt), std::max(0.0, s.S - s.T)) : std::max(0.0, s.S - s.T);
  s.row_len = s.Pp + s.T;
  s.prompt_keys = in.longest_prompt >= 0 ? "the longest prompt (" + num(int64_t(s.Pp)) + " tokens)"
                                         : "model.max_seq_len - rollout.max_new_tokens (" + num(int64_t(s.Pp)) + ")";
  s.W = double(in.world_size > 0 ? in.world_size : env_count("WORLD_SIZE"));
  s.fp32 = c.precision.mode == precision::PrecisionMode::fp32;
  s.cb = s.fp32 ? 4 : 2;
  // FP16 weights compute in FP32 on the CPU, and precision.compute: fp32 always does (DESIGN.md).
  const bool fp16 =
      c.precision.mode == precision::PrecisionMode::fp16 || c.precision.mode == precision::PrecisionMode::fp16_sr;
  // auto may resolve to fp32 at start-up: counted as fp32 (the larger of the two).
  s.fb = c.precision.compute != precision::ComputeMode::native || fp16 ? 4 : s.cb;
  // What lowers the trainable state on one machine too: adapters instead of every parameter, and on
  // a GPU the optimizer state on the host (16-bit modes; not with LoRA, whose state is small).
  s.lora = c.lora.enabled();
  const bool can_offload = in.gpu && s.W == 1 && !s.lora && !s.fp32 && !precision::is_fp8(c.precision.mode);
  s.adapters_knob = s.lora ? "" : "lora.rank > 0 (train adapters; their state only)";
  s.shard_knob = joined_knobs({"more ranks (WORLD_SIZE) shard them",
                               can_offload ? "precision.offload: optimizer (host memory)" : "", s.adapters_knob});
  // The trainable state: every parameter, or with LoRA the adapters (A of them) on a frozen base
  // held once in the forward dtype, which is also the reference (no copy). Rounding the FP32 base
  // into it happens as the load ends, the FP32 weights beside their compute-dtype copy: no more
  // than the load phase's FP32 weights beside the mapped files (BF16 or FP32 files).
  s.offload = c.precision.offload == precision::Offload::optimizer;  // validate(): 16-bit, world size 1
  s.A = s.lora ? lora_param_count(m, c.lora) : s.P;
  s.mk = s.lora ? "lora.rank (" + num(c.lora.rank) + ") x lora.target_modules (" +
                      num(int64_t(c.lora.target_modules.size())) + ") x model.n_layers (" + num(m.n_layers) + ")"
                : model_keys(m);
  s.what = s.lora ? "adapter " : "";
  s.ref = c.grpo.needs_reference();
  s.pissa = s.lora && c.lora.init == model::LoraInit::pissa && c.grpo.base_adapter.empty();
  s.N = double(c.grpo.prompts_per_step) * double(c.grpo.group_size), s.N_rank = std::ceil(s.N / s.W);
  s.prompts_rank = std::ceil(double(c.grpo.prompts_per_step) / s.W);
  s.batch =
      "grpo.prompts_per_step (" + num(c.grpo.prompts_per_step) + ") x grpo.group_size (" + num(c.grpo.group_size) + ")";
  s.rows_knob = "lower grpo.prompts_per_step or rollout.max_new_tokens";
  return s;
}

// The input width of the widest adapted projection, and the (out, in) shape of the largest one.
struct AdaptedShapes {
  double widest_in = 0, svd_out = 0, svd_in = 0;
};
AdaptedShapes adapted_shapes(const RunConfig& c) {
  const model::ModelConfig& m = c.model;
  AdaptedShapes a;
  if (!c.lora.enabled()) return a;
  const double D = double(m.dim);
  for (const std::string& t : c.lora.target_modules) {
    const double q = double(m.n_heads * m.head_dim()), kv = double(m.n_kv_heads * m.head_dim()), F = double(m.ffn_dim);
    const double out = t == "q_proj"                    ? q
                       : t == "k_proj" || t == "v_proj" ? kv
                       : t == "o_proj"                  ? D
                       : t == "down_proj"               ? D
                                                        : F;
    const double in_f = t == "o_proj" ? q : t == "down_proj" ? F : D;
    a.widest_in = std::max(a.widest_in, in_f);
    if (out * in_f > a.svd_out * a.svd_in) std::tie(a.svd_out, a.svd_in) = std::pair(out, in_f);
  }
  return a;
}

// Held for the whole run (TrainableWeights, GrpoTrainer).
void state_parts(const RunConfig& c, const TrainShape& s, std::vector<MemoryPart>& parts) {
  const model::ModelConfig& m = c.model;
  if (s.lora)
    parts.push_back({"frozen base weights (forward dtype; also the reference policy)", model_keys(m), s.P * s.fb,
                     s.fb == 4 && s.cb != 4 ? "precision.compute: native keeps them in the compute dtype" : "", ""});
  const std::string fp32_knob = joined_knobs({s.adapters_knob,
                                              "a 16-bit precision.mode (bf16_sr) keeps 2-byte compute "
                                              "weights beside a sharded master"});
  if (s.fp32 && s.W == 1)
    parts.push_back({"FP32 master " + s.what + "weights (also the compute weights)", s.mk, s.A * 4, fp32_knob, ""});
  else if (s.fp32)
    parts.push_back({"FP32 compute " + s.what + "weights (all of them; this rank's master is its shard of them)", s.mk,
                     s.A * 4, fp32_knob, ""});
  else if (s.offload)
    parts.push_back({"FP32 master weights (host: precision.offload)", s.mk, s.A * 4, "", "", true});
  else
    parts.push_back({"FP32 master " + s.what + "weights (this rank's shard)", s.mk, s.A * 4 / s.W, s.shard_knob, ""});
  if (s.offload) {
    parts.push_back({"AdamW moments (host: precision.offload)", s.mk, s.A * 8, "", "", true});
    parts.push_back({"offload staging slices of the gradient and compute weights (pinned host)",
                     "min(parameters, 2^22)", std::min(s.A, kSliceElems) * (4 + s.cb), "", "", true});
  } else {
    parts.push_back({"AdamW moments (this rank's shard)", s.mk, s.A * 8 / s.W, s.shard_knob, ""});
  }
  parts.push_back({s.W > 1 ? "flat FP32 gradient and this rank's reduced shard" : "flat FP32 gradient", s.mk,
                   s.A * 4 * (1 + (s.W > 1 ? 1 / s.W : 0)), s.adapters_knob, ""});
  if (!s.fp32)
    parts.push_back({"compute " + s.what + "weights (" + std::string(s.cb == 2 ? "16-bit" : "FP32") + ")", s.mk,
                     s.A * s.cb, s.adapters_knob, ""});
  if (s.fb == 4 && s.cb != 4)
    parts.push_back({"FP32 forward copy of the compute " + s.what + "weights (precision.compute)", s.mk, s.A * 4,
                     "precision.compute: native computes in the compute dtype", ""});
  if (s.ref && !s.lora)
    parts.push_back({"frozen reference policy (forward dtype)", s.mk, s.P * s.fb,
                     "grpo.ref_metrics_every: 0 with grpo.kl_coef: 0 keeps no reference", ""});
  if (s.lora) parts.push_back({"adapters' start compute weights (changed_from_start)", s.mk, s.A * s.cb, "", ""});
  if (s.pissa)
    parts.push_back({s.ref ? "PiSSA start adapters (FP32, for the export) and the reference's copy (forward dtype)"
                           : "PiSSA start adapters (FP32, for the export)",
                     s.mk, s.A * (4 + (s.ref ? s.fb : 0)), "", ""});
  parts.push_back({"optimizer scratch slice", "min(parameters, 2^22)", std::min(s.A, kSliceElems) * s.cb, "", ""});
  if (precision::is_fp8(c.precision.mode)) {
    // The output channels of the linear layers: an amax and an exponent each.
    const double channels = double(precision::fp8_channel_count(model::llama_layout(m).fp8_matrices()));
    parts.push_back({"FP8 channel maxima and exponents", s.mk, channels * 8, "", ""});
    parts.push_back({"FP8 update slice (the fused AdamW's discarded BF16 output)", "min(parameters, 2^22)",
                     std::min(s.P, kSliceElems) * 2, "", ""});
  }
}

// Loading the base model (and PiSSA's start, one adapted matrix at a time).
void load_parts(const RunConfig& c, const MemoryPlanInputs& in, const TrainShape& s, std::vector<MemoryPart>& parts) {
  const model::ModelConfig& m = c.model;
  const AdaptedShapes adapted = adapted_shapes(c);
  const double svd_out = adapted.svd_out, svd_in = adapted.svd_in;
  // Loading the base model: its files mapped while the FP32 buffer fills (before anything else),
  // both in host memory: on a GPU the trainer moves the buffer to the device after the load.
  // Offloaded, the loaded buffer is the host master (held above).
  if (!s.offload)  // the whole model, LoRA too
    parts.push_back({"FP32 weights being loaded", model_keys(m), s.P * 4, "", "load", in.gpu});
  parts.push_back({"base model files, mapped while converted", "the weight files of grpo.base_model",
                   in.weight_file_bytes > 0 ? in.weight_file_bytes : s.P * 4, "", "load", s.offload || in.gpu});
  if (s.pissa &&
      c.lora.pissa_niter == 0) {  // one matrix at a time: LAPACK's copy of it, U, S, V^T, its workspace (about 5 k^2)
    const double k = std::min(svd_out, svd_in);
    parts.push_back({"PiSSA: the SVD of the largest adapted matrix", model_keys(m),
                     (svd_out * svd_in + svd_out * k + k * svd_in + 5 * k * k) * 4,
                     "lora.pissa_niter > 0 (a randomized SVD)", "load", in.gpu});
  } else if (s.pissa) {  // one matrix at a time: the (in, r) and (out, r) bases, Q^T W (r, in) and its SVD
    const double r = double(c.lora.rank);
    parts.push_back({"PiSSA: the randomized SVD of the largest adapted matrix", model_keys(m) + ", lora.rank",
                     (4 * (svd_out + svd_in) * r + 2 * r * svd_in) * 4, "", "load", in.gpu});
  }
}

void rollout_parts(const RunConfig& c, const TrainShape& s, std::vector<MemoryPart>& parts) {
  const model::ModelConfig& m = c.model;
  // Rollout: this rank's KV cache (2 x layers x rows x row length x kv_dim), the prompts' shared
  // prefill cache, the sampling uniforms of the whole batch (N, T) and one decode step's logits and
  // sampling buffers.
  parts.push_back(
      {"KV cache of the rollout",
       "(rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ") + " + s.prompt_keys + ") x " + s.batch,
       2 * s.L * s.N_rank * s.row_len * s.kv_dim * s.fb + 2 * s.L * s.prompts_rank * s.Pp * s.kv_dim * s.fb,
       s.rows_knob, "rollout"});
  // tools: during a tool round the rows' kept contexts (at most a row each) sit beside the round's
  // cache, whose slots hold a kept context, the appended results and the round's budget (each at
  // most rollout.max_new_tokens past the prompt): prompt + 3 x max_new_tokens a row.
  if (c.tools.enabled())
    parts.push_back(
        {"KV caches of the tool rounds (the rows' kept contexts and a round's)",
         "(" + s.prompt_keys + " + 3 x rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ")) x " + s.batch,
         2 * s.L * s.N_rank * (s.Pp + 3 * s.T) * s.kv_dim * s.fb, s.rows_knob, "rollout"});
  parts.push_back({"sampling uniforms and one decode step's logits",
                   s.batch + " x model.vocab_size (" + num(m.vocab_size) + ")",
                   s.N * s.T * 4 + s.N_rank * s.V * (s.fb + 12), s.rows_knob, "rollout"});
}

// The log-prob passes: with gradients (the update) and without (old and reference log-probs).
void update_parts(const RunConfig& c, const TrainShape& s, std::vector<MemoryPart>& parts) {
  const model::ModelConfig& m = c.model;
  const double widest_in = adapted_shapes(c).widest_in;
  // Rows per forward of the log-prob passes: a minibatch, or grpo.logprob_chunk_rows of it.
  double rows = std::ceil(s.N_rank / std::max<double>(1.0, double(c.grpo.minibatches)));
  std::string row_keys = s.batch + " / grpo.minibatches (" + num(c.grpo.minibatches) + ")";
  if (c.grpo.logprob_chunk_rows > 0 && double(c.grpo.logprob_chunk_rows) < rows) {
    rows = double(c.grpo.logprob_chunk_rows);
    row_keys = "grpo.logprob_chunk_rows (" + num(c.grpo.logprob_chunk_rows) + ")";
  }
  const std::string knob = "raise grpo.minibatches or lower grpo.logprob_chunk_rows (sequences per forward)";
  // Tokens per forward: the rows' completions and each group's prompt once (the full rows when a
  // sliding window shorter than a row makes forward_completions fall back to them).
  const bool shared = !(m.sliding_window > 0 && double(m.sliding_window) < s.row_len);
  const double tokens =
      shared ? rows * s.T + std::ceil(rows / std::max(1.0, double(c.grpo.group_size))) * s.Pp : rows * s.row_len;
  const std::string token_keys = row_keys + " x (rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ") + " +
                                 s.prompt_keys +
                                 (shared ? " / grpo.group_size (" + num(c.grpo.group_size) + ")" : std::string()) + ")";
  // With LoRA each adapted projection also keeps its x A^T (r per token) for B's gradient, and s B (x A^T).
  const double lora_out = s.lora ? double(c.lora.rank) * double(c.lora.target_modules.size()) * 2 * s.fb : 0;
  const double per_layer = layer_activation_bytes(m, s.fb) + lora_out;
  // Activations kept for the backward; with model.activation_checkpointing each layer's input, plus
  // one layer's activations recomputed.
  parts.push_back({"activations kept for the backward",
                   token_keys + " x model.n_layers (" + num(m.n_layers) + ")" +
                       (m.activation_checkpointing ? " with model.activation_checkpointing" : ""),
                   m.activation_checkpointing ? tokens * (s.L * s.D * s.fb + per_layer) : tokens * s.L * per_layer,
                   m.activation_checkpointing ? knob : knob + ", or set model.activation_checkpointing: true",
                   "update"});
  // lora.dropout: one module's keep bits (a byte each) and its dropped input at a time, in the
  // forward and again in the backward (regenerated, never kept).
  if (s.lora && c.lora.dropout > 0)
    parts.push_back({"lora.dropout: one adapted module's mask and dropped input", token_keys,
                     tokens * widest_in * (1 + 2 * s.fb), knob, "update"});
  // The fused head: grpo.logprob_chunk_tokens positions of each row at a time, its logits in the
  // forward dtype, their FP32 log-softmax and, in the backward, the recomputed logits and their
  // gradient (the head's weight gradient goes into the flat gradient).
  const double slice = c.grpo.logprob_chunk_tokens > 0 ? std::min(s.T, double(c.grpo.logprob_chunk_tokens)) : s.T;
  const std::string head_keys = row_keys + " x min(grpo.logprob_chunk_tokens (" + num(c.grpo.logprob_chunk_tokens) +
                                "), rollout.max_new_tokens) x model.vocab_size (" + num(m.vocab_size) + ")";
  const std::string head_knob = "lower grpo.logprob_chunk_tokens or grpo.logprob_chunk_rows";
  parts.push_back({"LM head slice: logits, log-softmax and their gradient", head_keys,
                   rows * slice * s.V * (2 * s.fb + 12), head_knob, "update"});
  parts.push_back({"hidden states and per-token log-probs of the rows", token_keys,
                   tokens * s.D * s.fb * 3 + rows * s.T * 4 * 8, knob, "update"});
  // The no-gradient passes (old log-probs, the reference's): one layer's outputs at a time and
  // the head's slices, with the reference's beside the policy's.
  parts.push_back({"activations of one layer (no gradient)", token_keys,
                   tokens * (3 * s.D + 3 * double(m.ffn_dim)) * s.fb + tokens * s.D * s.fb * 2, knob, "log-probs"});
  parts.push_back({"LM head slices (no gradient; the reference's beside the policy's)", head_keys,
                   rows * slice * s.V * (s.fb + 8) * (s.ref ? 2 : 1), head_knob, "log-probs"});
}

// The optimizer step, checkpoints and evaluations.
void late_parts(const RunConfig& c, const MemoryPlanInputs& in, const TrainShape& s, std::vector<MemoryPart>& parts) {
  // Optimizer step and weight statistics: bounded slices of the flat buffers; with several ranks the
  // copy of this rank's shard of the compute weights that the all-gather sends.
  parts.push_back({"optimizer and weight-statistics slices", "min(parameters, 2^22)",
                   std::min(s.A, kSliceElems) * (4 * 3 + 8), "", "optimizer"});
  if (s.W > 1)
    parts.push_back({"this rank's shard of the compute weights, copied for the all-gather", s.mk + " / WORLD_SIZE",
                     s.A * s.cb / s.W, "", "optimizer"});
  // Checkpoints: each rank writes its own shard of the master and moments from the buffers
  // themselves; from a device (not offloaded) through a host copy of the shard.
  if (in.gpu && !s.offload)
    parts.push_back({"this rank's FP32 master and moments copied to the host (checkpoint)", s.mk + " / WORLD_SIZE",
                     s.A * 12 / s.W, "", "checkpoint", /*host=*/true});
  // Greedy evaluation of the test records, 128 at a time (EvalOptions::batch_size).
  const double eval_rows =
      std::ceil(std::min(128.0, c.grpo.eval_samples > 0 ? double(c.grpo.eval_samples) : 128.0) / s.W);
  parts.push_back({"evaluation KV cache and logits",
                   "min(128, grpo.eval_samples (" + num(c.grpo.eval_samples) + ")) x (rollout.max_new_tokens (" +
                       num(c.rollout.max_new_tokens) + ") + " + s.prompt_keys + ")" +
                       (c.tools.enabled() ? "; with tools 2 x that + 2 x rollout.max_new_tokens (a tool round)" : ""),
                   2 * s.L * eval_rows * (c.tools.enabled() ? 2 * s.Pp + 4 * s.T : s.row_len) * s.kv_dim * s.fb +
                       eval_rows * s.V * (s.fb + 12),
                   "lower grpo.eval_samples", "evaluation"});
}

void train_parts(const RunConfig& c, const MemoryPlanInputs& in, std::vector<MemoryPart>& parts) {
  const TrainShape s = train_shape(c, in);
  state_parts(c, s, parts);
  load_parts(c, in, s, parts);
  rollout_parts(c, s, parts);
  update_parts(c, s, parts);
  late_parts(c, in, s, parts);
}

}  // namespace

double MemoryPlan::held() const {
  double t = baseline;
  for (const MemoryPart& p : parts)
    if (p.phase.empty() && on_device(p)) t += p.bytes;
  return t;
}

double MemoryPlan::phase_bytes(const std::string& phase) const {
  double t = 0;
  for (const MemoryPart& p : parts)
    if (p.phase == phase && on_device(p)) t += p.bytes;
  return t;
}

double MemoryPlan::host_bytes() const {
  double held = 0;
  std::map<std::string, double> phase;
  for (const MemoryPart& p : parts)
    if (!on_device(p)) (p.phase.empty() ? held : phase[p.phase]) += p.bytes;
  double peak = 0;
  for (const auto& [name, bytes] : phase) peak = std::max(peak, bytes);
  return held + peak;
}

double MemoryPlan::other_process_bytes() const {
  double t = 0;
  for (const MemoryPart& p : parts)
    if (p.other_process && on_device(p)) t += p.bytes;
  return t;
}

double MemoryPlan::phase_peak(const std::string& phase) const {
  return phase == "load" ? baseline + other_process_bytes() + phase_bytes(phase) : held() + phase_bytes(phase);
}

std::vector<std::string> MemoryPlan::phases() const {
  std::vector<std::string> out;
  for (const MemoryPart& p : parts)
    if (!p.phase.empty() && std::find(out.begin(), out.end(), p.phase) == out.end()) out.push_back(p.phase);
  return out;
}

double MemoryPlan::peak() const {
  double best = held();
  for (const std::string& ph : phases()) best = std::max(best, phase_peak(ph));
  return best;
}

std::string MemoryPlan::peak_phase() const {
  std::string best;
  double bytes = held();
  for (const std::string& ph : phases())
    if (phase_peak(ph) > bytes) {
      bytes = phase_peak(ph);
      best = ph;
    }
  return best;
}

MemoryPlan plan_memory(const RunConfig& c, const std::string& command, const MemoryPlanInputs& in) {
  const model::ModelConfig& m = c.model;
  const double P = param_count(m), V = double(m.vocab_size), S = double(m.max_seq_len);
  MemoryPlan plan;
  plan.command = command;
  plan.baseline = in.baseline_bytes;
  plan.gpu = in.gpu;
  std::vector<MemoryPart>& parts = plan.parts;
  if (command == "train") {
    train_parts(c, in, parts);
    if (in.reward_workers > 0)
      parts.push_back({"reward workers: " + num(in.reward_workers) +
                           " process(es) beside this one, resident at start "
                           "(measured; each may grow to its memory_mb)",
                       "reward.function.workers / reward.code.workers (or the terms'): " + num(in.reward_workers),
                       in.reward_worker_bytes,
                       "lower reward.function.workers (reward.code.workers for the code verifier)", "", /*host=*/true,
                       /*other_process=*/true});
    if (in.tool_workers > 0)
      parts.push_back({"tool workers: " + num(in.tool_workers) +
                           " process(es) beside this one, resident at start "
                           "(measured; each may grow to tools.memory_mb, " +
                           num(c.tools.memory_mb) + " MiB)",
                       "tools.workers: " + num(in.tool_workers), in.tool_worker_bytes,
                       "lower tools.workers (tools.memory_mb caps each)", "", /*host=*/true,
                       /*other_process=*/true});
  } else {
    // Weights: eval holds the FP32 weights and a compute copy; SFT adds gradients, the AdamW moments
    // and the starting point: ~6 FP32 copies.
    parts.push_back({"weights and optimizer state", model_keys(m), P * 4 * (command == "eval" ? 2 : 6), "", ""});
  }
  if (command == "sft") {
    // Logits (B, S, V), their gradient and the cross-entropy's log-softmax; activations per layer
    // kept for backward (about 8 of width dim + ffn_dim per token and layer).
    const std::string batch =
        "sft.batch_size (" + num(c.sft.batch_size) + ") x model.max_seq_len (" + num(m.max_seq_len) + ")";
    parts.push_back({"batch logits", batch + " x model.vocab_size (" + num(m.vocab_size) + ")",
                     double(c.sft.batch_size) * S * V * 4 * 3, "lower sft.batch_size", "step"});
    parts.push_back({"batch activations",
                     batch + " x model.n_layers (" + num(m.n_layers) + ") x model.ffn_dim (" + num(m.ffn_dim) + ")",
                     double(c.sft.batch_size) * S * double(m.n_layers) * double(m.dim + m.ffn_dim) * 4 * 8,
                     "lower sft.batch_size", "step"});
  }
  sort_largest_first(parts);
  return plan;
}

std::string memory_report(const MemoryPlan& plan) {
  const std::string at = plan.peak_phase();
  std::string out = "memory plan per rank: peak " + format_bytes(plan.peak()) +
                    (at.empty() ? std::string() : " (" + at + ")") + "; held all run " + format_bytes(plan.held());
  if (plan.baseline > 0)
    out += "\n  " + format_bytes(plan.baseline) + "  process baseline (libtorch, tokenizer, data; measured)";
  for (const MemoryPart& p : plan.parts)
    if (p.phase.empty() && plan.on_device(p)) out += "\n  " + format_bytes(p.bytes) + "  " + p.what;
  for (const std::string& ph : plan.phases()) {
    out += "\n  " + ph + ": peak " + format_bytes(plan.phase_peak(ph)) +
           (ph == "load" ? " (before the optimizer state exists)" : "");
    for (const MemoryPart& p : plan.parts)
      if (p.phase == ph && plan.on_device(p)) out += "\n    " + format_bytes(p.bytes) + "  " + p.what;
  }
  if (plan.host_bytes() > 0) {
    out += "\n  host memory (a GPU run's load; precision.offload's state): peak " + format_bytes(plan.host_bytes());
    for (const MemoryPart& p : plan.parts)
      if (!plan.on_device(p)) out += "\n    " + format_bytes(p.bytes) + "  " + p.what;
  }
  return out;
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
    throw UserError("rollout.max_new_tokens (" + num(c.rollout.max_new_tokens) + ") must be < model.max_seq_len (" +
                    num(c.model.max_seq_len) + "): prompt and completion together must fit the model's context");
}

MemoryLimit host_memory_limit(double bytes) {
  // The ranks started on this machine (LOCAL_WORLD_SIZE) share its memory.
  return {bytes, "this machine's " + format_bytes(bytes), env_count("LOCAL_WORLD_SIZE")};
}

MemoryLimit gpu_memory_limit(int device) {
  double free = 0, total = 0;
  if (!cuda_memory(device, &free, &total)) return {0, "", 1};  // unknown: no check
  // Each rank has a GPU of its own (resolve_device refuses ranks sharing one).
  return {
      free,
      "the free memory of cuda:" + std::to_string(device) + ", " + format_bytes(free) + " of " + format_bytes(total),
      1};
}

namespace {

// The error's list of changes and the per-rank peak each would give against `limit`.
std::string knob_lines(const std::vector<KnobPlan>& knobs, const MemoryLimit& limit) {
  if (knobs.empty()) return "";
  std::string out = "\nwhat one change would give (planned peak per rank; " +
                    format_bytes(limit.bytes / double(limit.ranks)) + " fits):";
  for (const KnobPlan& k : knobs)
    out += "\n  " + k.change + ": " + format_bytes(k.peak) +
           (k.host > 0 ? " (+ " + format_bytes(k.host) + " of host memory)" : std::string()) +
           (k.peak * double(limit.ranks) <= limit.bytes ? " - fits" : "");
  return out;
}

}  // namespace

void check_memory(const MemoryPlan& plan, const MemoryLimit& limit,
                  const std::function<std::vector<KnobPlan>()>& knobs) {
  if (plan.host_bytes() > 0) {  // a GPU run's load and offloaded state against this machine's memory
    const MemoryLimit host = host_memory_limit(available_memory_bytes());
    if (host.bytes > 0 && plan.host_bytes() * double(host.ranks) > host.bytes)
      throw UserError(plan.command + ": the host memory of this GPU run, " +
                      format_bytes(plan.host_bytes() * double(host.ranks)) + ", exceeds " + host.where +
                      " (the FP32 weights loaded beside their mapped files; with precision.offload: optimizer "
                      "the FP32 master and AdamW moments, 12 bytes per parameter)\n" +
                      memory_report(plan));
  }
  if (limit.bytes <= 0 || plan.parts.empty()) return;  // unknown size: nothing to compare against
  const double peak = plan.peak();
  if (peak * double(limit.ranks) <= limit.bytes) return;
  // The largest part of the peak (its phase's or a held one), and the knobs of the other large ones.
  const std::string at = plan.peak_phase();
  std::vector<const MemoryPart*> in_peak;
  for (const MemoryPart& p : plan.parts)
    if (plan.on_device(p) && (at == "load" ? p.phase == "load" : (p.phase.empty() || p.phase == at)))
      in_peak.push_back(&p);
  std::stable_sort(in_peak.begin(), in_peak.end(),
                   [](const MemoryPart* a, const MemoryPart* b) { return a->bytes > b->bytes; });
  const MemoryPart& big = *in_peak.front();
  std::string others;
  for (std::size_t i = 1; i < in_peak.size() && i < 4; ++i)
    if (!in_peak[i]->knob.empty() && in_peak[i]->knob != big.knob)
      others += "; " + in_peak[i]->what + ", " + format_bytes(in_peak[i]->bytes) + ": " + in_peak[i]->knob;
  throw UserError(plan.command + ": planned peak memory " + format_bytes(peak * double(limit.ranks)) +
                  (at.empty() ? std::string() : " (" + at + ")") +
                  (limit.ranks > 1
                       ? " (" + format_bytes(peak) + " per rank x LOCAL_WORLD_SIZE " + num(limit.ranks) + ")"
                       : std::string()) +
                  " exceeds " + limit.where + "; largest part: " + big.what + ", " + format_bytes(big.bytes) +
                  ", sized by " + big.keys + " (" + (big.knob.empty() ? "lower it" : big.knob) + ")" +
                  (others.empty() ? std::string() : "; next:" + others.substr(1)) +
                  (knobs ? knob_lines(knobs(), limit) : std::string()) + "\n" + memory_report(plan));
}

MemoryLimit device_memory_limit(const ResolvedDevice& d) {
  if (d.kind == DeviceKind::cuda) return gpu_memory_limit(d.index);
  // A cgroup limit (a container's, a Slurm job's) below what the machine has free is the one the
  // kernel's out-of-memory killer enforces.
  MemoryLimit host = host_memory_limit(available_memory_bytes());
  const MemoryCeiling cg = cgroup_memory_ceiling();
  if (cg.limit > 0 && cg.limit - cg.used < host.bytes)
    host = {std::max(0.0, cg.limit - cg.used),
            "the cgroup memory limit " + format_bytes(cg.limit) + " (" + cg.source + "), " +
                format_bytes(std::max(0.0, cg.limit - cg.used)) + " of it free",
            host.ranks};
  return host;
}

}  // namespace unstuck::train
