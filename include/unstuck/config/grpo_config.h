// Options of the GRPO trainer: the base policy, the rollout batch (prompts x group size), the
// advantage and policy-loss variants, the KL penalty, the update schedule and evaluation cadence.
// The optimizer comes from `optim`, sampling from `rollout`, the weight format from `precision`.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "unstuck/algo/advantages.h"
#include "unstuck/algo/dynamic_sampling.h"
#include "unstuck/algo/loss_options.h"
#include "unstuck/algo/reward_shaping.h"
#include "unstuck/config/lr_schedule.h"

namespace unstuck::config {

struct GrpoConfig {
  std::string base_model = "runs/sft-countdown/model";  // policy directory (an SFT output)
  std::string base_adapter;                             // a PEFT LoRA adapter directory to start from (lora.rank > 0)
  bool round_base_to_bf16 = false;                      // put the base weights on the BF16 grid before training
  bool round_base_to_fp8 = false;  // or on fp8_rn's grid (E4M3, the base's channel scales) in every mode
  int64_t steps = 100;             // rollout batches (policy updates when minibatches = 1)
  int64_t prompts_per_step = 32;   // prompts sampled per rollout batch
  int64_t group_size = 8;          // completions per prompt (the GRPO group)
  int64_t minibatches = 1;         // optimizer steps per rollout batch and epoch
  int64_t ppo_epochs = 1;          // passes over each rollout batch
  algo::AdvantageMode advantage = algo::AdvantageMode::grpo;
  algo::RewardScale scale_rewards = algo::RewardScale::auto_;  // divisor of the centered reward
  double clip_low = 0.2;                                       // ratio lower bound 1 - clip_low
  double clip_high = 0.28;                                     // ratio upper bound 1 + clip_high (clip-higher)
  double clip_ratio_c = 3.0;                                   // dual clip of negative advantages (0 = off, else > 1)
  algo::ImportanceRatio importance_ratio = algo::ImportanceRatio::token;  // token (PPO) | sequence (GSPO)
  algo::Overlong overlong = algo::Overlong::none;  // truncated completions: none | filter | soft_penalty (DAPO)
  int64_t overlong_buffer = 0;  // soft_penalty: L_cache, the tokens before max_new_tokens where it ramps
  algo::GroupFilter filter_groups = algo::GroupFilter::none;  // DAPO's dynamic sampling: drop flat groups
  int64_t oversample = 0;  // filter_groups: extra rollout rounds at most, to fill the batch
  double tis_cap = 0.0;    // truncated importance sampling cap (0 = off, else >= 1)
  algo::LossAggregation loss_aggregation = algo::LossAggregation::token_mean;
  double kl_coef = 0.0;  // KL-to-reference penalty in the loss (0 = off, still logged)
  algo::KlEstimator kl_estimator = algo::KlEstimator::k3;
  algo::KlIn kl_in = algo::KlIn::loss;  // the KL penalty in the loss, or in the reward
  double entropy_coef = 0.0;            // entropy bonus (0 = off)
  LrScheduleConfig lr;                  // grpo.lr_schedule, grpo.warmup_steps, grpo.min_lr_ratio (constant by default)
  int64_t eval_every = 20;              // rollout batches between greedy test evaluations; 0 = end only
  int64_t log_rollouts_every = 0;       // steps between rollouts written to rollouts.jsonl; 0 = never
  int64_t eval_samples = 200;           // test records per evaluation (0 = all)
  int64_t checkpoint_every = 25;        // rollout batches between checkpoints (and at the end); 0 = end only
  int64_t keep_checkpoints = 2;         // newest checkpoints kept
  bool final_model = true;              // write <run dir>/final_model/ (HF model dir, compute weights) at the end
  int64_t ref_metrics_every = 1;        // rollout batches between KL-to-reference measurements (kl_coef > 0: every)
  int64_t logprob_chunk_rows = 0;       // sequences per forward(/backward) of the log-prob passes; 0 = whole minibatch
  int64_t logprob_chunk_tokens = 16;  // completion positions of each row per head / log-softmax slice; 0 = all at once

  // A frozen reference policy is needed: for the KL term, or for its measurements.
  bool needs_reference() const { return kl_coef > 0 || ref_metrics_every > 0; }

  template <class V>
  void visit(V& v) {
    v("base_model", base_model, "policy directory to start from (an `unstuck sft` output)");
    v("base_adapter", base_adapter,
      "with lora.rank > 0: a PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors, e.g. an "
      "SFT-LoRA) whose adapters start the run instead of lora.init; its r, lora_alpha, use_rslora and "
      "target_modules must equal the lora: keys");
    v("round_base_to_bf16", round_base_to_bf16,
      "round the base weights to BF16 (nearest) first, so the FP32 master starts on the BF16 grid "
      "as released checkpoints do");
    v("round_base_to_fp8", round_base_to_fp8,
      "instead, round the base weights to nearest on the FP8 E4M3 grid of precision.mode fp8_rn (per-channel "
      "power-of-two scales of the base; the other tensors to BF16) in every mode, so FP16 and FP8 arms start from "
      "the same weights (rounded on the host as the base loads)");
    v("steps", steps, "rollout batches to train on");
    v("prompts_per_step", prompts_per_step, "prompts per rollout batch");
    v("group_size", group_size, "completions sampled per prompt (the GRPO group, >= 2)");
    v("minibatches", minibatches, "optimizer steps per rollout batch and epoch");
    v("ppo_epochs", ppo_epochs, "passes over each rollout batch");
    v("advantage", advantage,
      "baseline: grpo (r - group mean) / group std; mean_only: r - group mean (Dr. GRPO); rloo: r - mean of the "
      "group's other completions (RLOO); reinforce_pp: (r - batch mean) / batch std (REINFORCE++); grpo_passk: "
      "only the group's best completion, r_max - r_second / group std (verl's pass@k)");
    v("scale_rewards", scale_rewards,
      "divisor of the centered reward (TRL's scale_rewards): auto (grpo, grpo_passk: group, reinforce_pp: batch, "
      "mean_only and rloo: none) | group (the group's std) | batch (the whole batch's std) | none");
    v("clip_low", clip_low, "importance ratio lower bound 1 - clip_low");
    v("clip_high", clip_high, "importance ratio upper bound 1 + clip_high (clip-higher)");
    v("clip_ratio_c", clip_ratio_c,
      "dual clip (verl's clip_ratio_c): a negative-advantage token's loss is at most -A x this; 0 = off, else > 1");
    v("overlong", overlong,
      "completions truncated at rollout.max_new_tokens: none; filter (no part in the loss, DAPO's overlong "
      "filtering); soft_penalty (DAPO's length penalty added to every reward, ramping from 0 to -1 over the last "
      "overlong_buffer tokens)");
    v("overlong_buffer", overlong_buffer,
      "soft_penalty: the ramp's length L_cache in tokens, in [1, rollout.max_new_tokens]");
    v("filter_groups", filter_groups,
      "dynamic sampling (DAPO): none; zero_variance: groups whose rewards (verifier and overlong shaping, before a "
      "KL in the reward) are all equal are dropped, and more prompts are rolled out (grpo.oversample rounds at "
      "most) until the batch holds prompts_per_step informative groups; short of them, dropped groups fill the "
      "rest with no part in the loss (logged: sampling_rounds, groups_dropped, groups_filled)");
    v("oversample", oversample,
      "filter_groups: the extra rollout rounds of prompts_per_step prompts a step may draw to fill its batch");
    v("tis_cap", tis_cap,
      "truncated importance sampling (verl's tis_imp_ratio_cap): each token's policy-gradient loss times "
      "min(p_trainer / p_sampler, tis_cap), with the clip ratio taken against the trainer's own log-probs "
      "before the update; 0 = off, else >= 1 (2 is the TIS authors' choice)");
    v("importance_ratio", importance_ratio,
      "token: PPO's per-token ratio; sequence: GSPO's per-sequence ratio (exp of the mean token log-ratio), with "
      "clip_low/clip_high on it (GSPO uses about 3e-4 / 4e-4) and seq_mean_token_mean as in the paper");
    v("loss_aggregation", loss_aggregation, "token_mean | seq_mean_token_mean | seq_mean_token_sum_norm (Dr. GRPO)");
    v("kl_coef", kl_coef, "weight of the KL penalty to the reference policy (see kl_in); 0 = off");
    v("kl_estimator", kl_estimator, "KL estimator of the penalty: k1 | k2 | k3");
    v("kl_in", kl_in,
      "where kl_coef's penalty acts: loss (a term of the policy loss, GRPO) | reward (subtracted from each "
      "completion's reward before the advantages: r - kl_coef x the sum of the estimator over its tokens, with "
      "the sampler's log-probs; verl's use_kl_in_reward)");
    v("entropy_coef", entropy_coef, "weight of the entropy bonus; 0 = off");
    lr.visit(v);
    v("eval_every", eval_every, "rollout batches between greedy test evaluations; 0 = at the end only");
    v("log_rollouts_every", log_rollouts_every,
      "steps between writes of the step's rollouts to <run dir>/rollouts.jsonl (rank r > 0: "
      "rollouts-rank<r>.jsonl): prompt, completion, its turns (the policy's and the tools'), reward; 0 = never");
    v("eval_samples", eval_samples, "test records per evaluation; 0 = the whole split");
    v("checkpoint_every", checkpoint_every,
      "rollout batches between checkpoints (and one at the end); 0 = at the end only");
    v("keep_checkpoints", keep_checkpoints, "newest checkpoints kept in <run dir>/checkpoints");
    v("final_model", final_model,
      "at the end, write <run dir>/final_model/: a Hugging Face model directory of the final compute weights (with "
      "LoRA, <run dir>/final_adapter/: a PEFT adapter directory of the adapters' final compute weights)");
    v("ref_metrics_every", ref_metrics_every,
      "rollout batches between the KL-to-reference metrics (kl_ref_k3, kl_ref_exact), also at the last step; "
      "steps without them log ref_metrics: false; 0 = never; kl_coef > 0 computes them every step");
    v("logprob_chunk_rows", logprob_chunk_rows,
      "sequences per forward (and backward) pass of the log-prob computations; 0 = the whole minibatch. "
      "Lower it when the logits (rows x sequence x vocabulary) do not fit");
    v("logprob_chunk_tokens", logprob_chunk_tokens,
      "completion positions of each row per slice of the fused LM head and log-softmax (rows x this x "
      "vocabulary FP32 values per slice, in the forward and again in the backward); 0 = all at once");
  }
};

}  // namespace unstuck::config
