// Private: one GRPO step as the data flow of DESIGN.md, on one device: rollout -> score ->
// advantages -> measure -> update -> metrics. The trainer owns the trainable weights, the frozen
// reference, the data order and the sampling stream; the run driver (grpo.cpp) owns loading,
// resuming, evaluation cadence, checkpoints and stop signals.
#pragma once

#include <torch/types.h>

#include <atomic>
#include <functional>
#include <cstdint>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/grpo_metrics.h"
#include "train/step_progress.h"
#include "unstuck/algo/policy_loss.h"
#include "unstuck/algo/token_logprobs.h"
#include "unstuck/config/run_config.h"
#include "unstuck/data/record.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/model/model_io.h"
#include "unstuck/reward/verifier.h"
#include "unstuck/rollout/sampler.h"
#include "unstuck/rollout/tools.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/evaluate.h"
#include "train/record_order.h"
#include "unstuck/train/run_plan.h"
#include "unstuck/train/run_setup.h"
#include "train/skip_guard.h"
#include "unstuck/train/trainable_weights.h"

namespace unstuck::train {

// A rollout batch as tensors on the trainer's device: N = prompts x group sequences of P
// (left-padded) prompt tokens and T completion tokens.
struct RolloutBatch {
  torch::Tensor tokens;    // (N, P + T) int64: left-padded prompt, completion (padded after its stop)
  torch::Tensor mask;      // (N, T) float: 1 on sampled completion tokens
  torch::Tensor old_logp;  // (N, T) sampling log-probs
  torch::Tensor lengths;   // (N) int64: sampled completion tokens of each row
  int64_t prompt_len = 0;
  // The distinct prompts (consecutive rows with equal prompts share one: a GRPO group), which the
  // training forward computes once each.
  torch::Tensor prompts;                    // (U, P) int64, left-padded
  torch::Tensor prompt_valid;               // (U, P) bool, or undefined when no prompt is padded
  torch::Tensor prompt_of_row;              // (N) int64 on the device
  std::vector<int64_t> prompt_of_row_host;  // the same, ascending
  std::vector<int64_t> lengths_host;        // (N) the lengths on the host
  // Each row's index in the step's whole batch (prompts_per_step x group_size rows, the same whatever
  // the world size): lora.dropout keys its masks by it.
  torch::Tensor global_rows;  // (N) int64 on the device
  std::vector<int64_t> global_rows_host;
  int64_t rows() const { return tokens.size(0); }
  // The training forwards of rows [begin, end) compute their completions up to the longest of them,
  // not the batch's T: the padding computed is bounded by each row chunk's own spread of lengths.
  int64_t width(int64_t begin, int64_t end) const;
  // (n, width) completion tokens of rows [begin, end) (`rows` = arange(begin, end) on the device).
  torch::Tensor targets(const torch::Tensor& rows, int64_t width) const;
  // Positions one forward over rows [begin, end) computes: their distinct prompts once, plus each
  // row's completion tokens up to width(begin, end), but the last.
  int64_t forward_positions(int64_t begin, int64_t end) const;
};

// Per-token measurements of the policy on a rollout batch before its update, each (N, T); the
// reference's are undefined on steps without the reference metrics.
using Measurement = algo::TokenStats;

class GrpoTrainer {
 public:
  // `master`: the base policy's FP32 flat weights (on any device; moved to `device`). `train`: the
  // training records (outlive the trainer); `my_test`: this rank's share of the test records.
  // `compute`: precision.compute resolved (native or fp32; see train::resolve_compute), which the
  // checkpoints record; `decisions`: the plan's (the reference kept, the decode mode, the measure
  // pass), which the trainer follows and checks its weights against. Moving `master` in lets the
  // weights adopt its buffer (no copy). LoRA (`base` given): `master` is the adapters' FP32 start,
  // `base` the frozen base's FP32 weights (moved to `device`); the reference is the base without
  // the adapters (no copy of it).
  GrpoTrainer(const RunConfig& config, const RunContext& ctx, dist::Communicator& comm, torch::Tensor master,
              const std::vector<data::TaskRecord>& train, std::vector<data::TaskRecord> my_test, torch::Device device,
              precision::ComputeMode compute, const RunDecisions& decisions, FrozenBase base = {},
              std::shared_ptr<reward::Verifier> scorer = nullptr, std::shared_ptr<rollout::ToolRunner> tools = nullptr);

  // One rollout batch: sample, score, update; returns its metrics line, reduced across ranks.
  MetricsLine step(int64_t step);
  // Greedy accuracy on the test records, over all ranks (a collective).
  double evaluate();

  // Continues from a checkpoint (master, moments, optimizer step, data order, sampling stream).
  void restore(const TrainerState& state, const std::string& where);
  // The checkpoint state after `step` (a collective: every rank gathers; rank 0's is complete).
  TrainerState checkpoint_state(int64_t step);

  // Marks "first rollout token" on `clock` during the next rollout and logs the start-up summary
  // (startup_record(); the run's end writes it to run.json).
  void report_startup(StartupClock* clock) { startup_ = clock; }
  // The start-up summary once the first rollout token came (null before), for run.json's end record.
  const nlohmann::json& startup_record() const { return startup_record_; }
  // The memory ceiling checked at the step's progress points (MemoryWatch::check throws).
  void watch_memory(const MemoryWatch* watch) { progress_.watch(watch); }
  // The run's stop flag (SIGINT/SIGTERM): reward workers scoring a step give up within 0.25 s once it
  // is set, and step() throws Interrupted (the step is not applied).
  void stop_scoring_on(const std::atomic<bool>* flag) { stop_flag_ = flag; }
  // Called at the end of the step's rollout ("rollout") and update ("update"), the plan's phases.
  void on_phase_end(std::function<void(const char* phase)> hook) { phase_end_ = std::move(hook); }

  const TrainableWeights& weights() const { return weights_; }
  torch::Device device() const { return device_; }
  // The frozen reference's weight dtype (none: no reference is kept, see grpo.ref_metrics_every).
  std::string reference_dtype() const;

 private:
  struct Rollouts {
    std::vector<const data::TaskRecord*> records;  // per row
    std::vector<std::vector<int32_t>> prompts;     // per row
    std::vector<rollout::Completion> completions;  // per row
    std::vector<uint8_t> in_loss;  // per row: 0 in a group that only fills the batch (filter_groups); empty: all 1
    std::vector<rollout::ToolTurnStats> tool_stats;  // per row, with tools.functions; else empty
  };
  struct Scores {
    std::vector<float> rewards;  // per row: the verifier's, plus the overlong shaping
    std::vector<uint8_t> right;  // per row: the verifier said correct
    double correct = 0, gen_tokens = 0;
    double truncated = 0;   // completions that reached rollout.max_new_tokens without a stop token
    double kl_penalty = 0;  // kl_in: reward: the sum of kl_coef x each row's KL taken from its reward
    int64_t errors = 0;     // rows the scorer failed on (status reward_error, reward 0)
    std::string first_error;
    int64_t not_applicable = 0;        // rows no scorer applied to (every function returned None): reward NaN
    std::string first_not_applicable;  // the prompt of the first
    // The scorer's named numbers by metric: reward_extra/<key> (RewardResult::extra) and
    // reward/<term> (RewardResult::terms) -> {sum, count} over every completion this rank sampled;
    // reward_metric/<name> (TRL's log_metric) -> {sum, count} over the calls.
    std::map<std::string, std::pair<double, double>> extra;
    void add_extra(const std::map<std::string, std::pair<double, double>>& more);
    void tally(const std::vector<rollout::Completion>& completions);  // the sums, from the rows
  };
  // How a step's batch was sampled (the same on every rank).
  struct Sampling {
    int64_t rounds = 1;               // rollout rounds of prompts_per_step prompts
    int64_t dropped = 0;              // zero-variance groups sampled and not in the batch (filter_groups)
    int64_t filled = 0;               // zero-variance groups in the batch because too few others were sampled
    double reward_sum = 0, rows = 0;  // over every completion sampled, all rounds and ranks
  };
  // A group of the step's candidates, whole on every rank (filter_groups gathers them).
  struct Candidate {
    const data::TaskRecord* record = nullptr;
    std::vector<rollout::Completion> completions;  // G
    std::vector<float> rewards;
    std::vector<uint8_t> right;
    std::vector<rollout::ToolTurnStats> tool_stats;  // G, with tools.functions; else empty
  };
  struct UpdateStats {
    double grad_norm = 0, lr = 0, loss_scale = 1, optimizer_seconds = 0;
    double update_ratio = 0;              // mean over the optimizer steps of ||delta w|| / ||w||
    std::vector<double> clipped, tokens;  // per optimizer step: clipped tokens, tokens (this rank)
    std::vector<double> clipped_low, clipped_high, dual_clipped;  // per optimizer step, by kind
    double forward_positions = 0;                                 // positions through the training forwards (this rank)
    // Completion positions the training forwards computed (each row chunk to its longest row) and
    // the sampled tokens among them (this rank): completion_padding_frac.
    double completion_positions = 0, completion_tokens = 0;
    OptimizerStepStats last;
  };
  struct Timings {
    double step = 0, rollout = 0, reward = 0, update = 0;
    dist::CommStats comm_before;
  };

  // This rank's rows of the step's batch, scored: one rollout round, or with grpo.filter_groups as
  // many as it takes (at most 1 + grpo.oversample) to fill it with informative groups.
  void sample(int64_t step, Rollouts* ro, Scores* sc, Sampling* smp, Timings* time);
  // The step's rollout phase: sample(), then the reward functions' failures checked (too many stop
  // the run) and their None results reported.
  void rollout_phase(int64_t step, Rollouts* ro, Scores* sc, Sampling* smp, Timings* time);
  // The rows' rewards as the advantages take them: with grpo.kl_in: reward, less kl_coef x each
  // row's KL to the reference (added up in sc->kl_penalty).
  std::vector<float> shaped_rewards(const RolloutBatch& batch, Scores* sc) const;
  // The step's prompts_per_step records, drawn from the data order (the same on every rank).
  std::vector<const data::TaskRecord*> draw_records();
  // This rank's rows of `records` (round r of a step draws its uniforms for global rows + r x N).
  Rollouts rollout(int64_t step, int64_t round, const std::vector<const data::TaskRecord*>& records);
  // Every rank's rows of a round, as whole groups in prompt order (a collective).
  // Each row's tool loop (counts and messages) from every rank into its group (tools.functions).
  void gather_tool_stats(const Rollouts& ro, std::vector<Candidate>& groups) const;
  std::vector<Candidate> gather_groups(const std::vector<const data::TaskRecord*>& records, const Rollouts& ro,
                                       const Scores& sc) const;
  void check_reward_errors(int64_t step, const Scores& sc, const Sampling& smp);
  algo::Advantages advantages_of(const std::vector<float>& rewards) const;
  Scores score(const Rollouts& rollouts, int64_t step) const;
  // (N) kl_coef x each row's KL to the reference over its sampled tokens, with the sampler's
  // log-probs (grpo.kl_in: reward), without gradients.
  torch::Tensor reward_kl(const RolloutBatch& batch) const;
  // Log-probs, entropy and (with_ref) the reference's log-probs on every row, without gradients.
  Measurement measure(const RolloutBatch& batch, bool with_ref) const;
  // Minibatches x epochs of clipped policy-gradient steps. With one epoch of one minibatch the
  // training forward also yields the measurement (`*measured`), saving a forward pass.
  UpdateStats update(int64_t step, const RolloutBatch& batch, const torch::Tensor& advantages, bool with_ref,
                     std::optional<Measurement>* measured);
  // One optimizer pass of update() (an epoch's minibatch): what its row chunks share.
  struct UpdatePass {
    int64_t step = 0, epoch = 0;
    bool with_ref = false, measure_here = false, need_ref_logits = false;
    double mb_tokens = 0;                                // the minibatch's completion tokens on this rank
    bool several_chunks = false;                         // the minibatch runs in more than one row chunk
    std::optional<Measurement>* measured = nullptr;      // the measurement made before, when not measured here
    std::vector<Measurement>* measured_parts = nullptr;  // measured here: each chunk's
  };
  // What one row chunk adds to its pass: tokens clipped (any side, low, high, dual; weighted by the
  // chunk's tokens), and the training forward's positions.
  struct ChunkSums {
    double clipped = 0, clipped_low = 0, clipped_high = 0, dual_clipped = 0;
    double forward_positions = 0, completion_positions = 0, completion_tokens = 0;
    ChunkSums& operator+=(const ChunkSums& o);
  };
  // Rows [cb, ce) of a pass: the policy's forward through the fused head, the clipped loss and its
  // backward into the flat gradient (and the measurement, when measured here).
  ChunkSums update_chunk(const UpdatePass& pass, const RolloutBatch& batch, const torch::Tensor& advantages, int64_t cb,
                         int64_t ce);
  // The pass's optimizer step at the scheduled LR, recorded in `up` with the pass's sums.
  void optimizer_pass(int64_t step, const ChunkSums& sums, double mb_tokens, UpdateStats* up);
  // The step's metrics line: this rank's sums (step_sums) added over the ranks, then each group of
  // metrics in the line's order.
  MetricsLine metrics(int64_t step, const Scores& scores, const Sampling& smp, const algo::Advantages& adv,
                      const RolloutBatch& batch, const Measurement& meas, const UpdateStats& up, const Timings& time);
  StepSums step_sums(const Scores& sc, const algo::Advantages& adv, const RolloutBatch& batch, const Measurement& meas,
                     const UpdateStats& up);
  // reward_mean, reward_std, not_applicable_frac, accuracy (the batch's rewards gathered: a collective).
  void add_reward_metrics(MetricsLine& m, const Scores& sc, const StepSums& s) const;
  // The reference KL, entropy, lengths, clip fractions, optimizer figures, log-prob mismatch.
  void add_policy_metrics(MetricsLine& m, const StepSums& s, const UpdateStats& up, bool with_ref) const;
  // reward_error_frac, the scorer's extras (a collective), TIS, dynamic sampling.
  void add_scorer_metrics(MetricsLine& m, const Scores& sc, const Sampling& smp, const StepSums& s) const;
  // zero_adv_frac, the times, changed_from_start_frac, the training forwards' tokens and padding.
  void add_step_metrics(MetricsLine& m, const Scores& sc, const StepSums& s, const UpdateStats& up,
                        const Timings& time) const;
  // sticking_frac_per_tensor and, with LoRA, sticking_frac_per_module.
  void add_sticking_metrics(MetricsLine& m, const UpdateStats& up) const;
  // Compute-weight elements of this rank's shard whose bits differ from the start policy's, a
  // bounded slice at a time: against the frozen reference (which holds the start weights) when one
  // is kept, else against the base model's files read again (as the run loaded and rounded them).
  // -1 once that is no longer possible (a base file changed; warned once).
  int64_t changed_from_start();
  // The LM head's input (final-normed hidden states, (n, T, D)) and weight at the positions
  // predicting the completion tokens of rows [begin, end), for algo::head_log_probs.
  // `dropout_key`: the training forward of the update, with lora.dropout's masks under that key.
  algo::HeadInput completion_head(const model::LlamaModel& m, const RolloutBatch& batch, int64_t begin, int64_t end,
                                  std::optional<uint64_t> dropout_key = std::nullopt) const;
  RolloutBatch make_batch(const Rollouts& rollouts) const;
  // tools.functions: the tool rounds of this rank's rows (grpo_tools.cpp), each row continuing with
  // its own sampling uniforms (gen_opts_.uniforms' row) from where its completion is, and from its
  // KV cache (`contexts`, kept by the rollout's first generate() call).
  void run_tools(Rollouts& ro, std::shared_ptr<rollout::KeptContexts> contexts);
  // tools.environment: each row's instance reset with its record, what reset() returns appended to
  // the row's prompt.
  void start_environments(Rollouts& ro);
  // The tool loop's hooks but `generate` (the calls parsed in the template's format, the workers,
  // the results' tokens) and its limits.
  rollout::ToolTurnHooks tool_hooks() const;
  rollout::ToolTurnLimits tool_limits() const;
  // grpo.log_rollouts_every: this rank's rows of the step appended to the run's rollouts JSONL.
  void log_rollouts(int64_t step, const Rollouts& ro, const Scores& sc) const;
  // The formatter of the prompts: ctx_'s, or with tools.functions the copy that renders the tools.
  const data::PromptFormatter& prompt_format() const { return tool_prompts_ ? *tool_prompts_ : ctx_.prompts; }
  bool reference_due(int64_t step) const;

 public:
  // lora.init pissa: the adapters' FP32 start (write_final_model converts the PEFT adapter with it);
  // undefined otherwise.
  const torch::Tensor& pissa_start() const { return pissa_start_; }

 private:
  // lora.dropout > 0: the key of the masks of an update forward of `step`, PPO epoch `epoch` (each
  // row is in one minibatch of an epoch); else none.
  std::optional<uint64_t> dropout_key(int64_t step, int64_t epoch) const;

  const RunConfig& cfg_;
  const RunContext& ctx_;
  dist::Communicator& comm_;
  torch::Device device_;
  const std::vector<data::TaskRecord>& train_;
  std::vector<data::TaskRecord> my_test_;
  std::vector<std::vector<int64_t>> rows_of_;  // global rows (prompt x completion) of each rank
  TrainableWeights weights_;
  // Frozen start policy in the forward dtype; with LoRA the base without adapters, on the policy's
  // own base weights.
  std::unique_ptr<model::LlamaModel> reference_;
  torch::Tensor start_adapters_;  // LoRA: the adapters' start compute weights (changed_from_start)
  torch::Tensor pissa_start_;     // lora.init pissa: the adapters' FP32 start (FrozenBase::start), on the host
  std::unique_ptr<model::FlatWeightsReader> base_reader_;  // without a reference: the start policy's files
  bool changed_lost_ = false;                              // changed_from_start() gave up (warned)
  std::unique_ptr<precision::WeightFormat> start_format_;  // the start weights' format, its scales the start master's
  std::unique_ptr<Fp8Channels> base_scales_;               // grpo.round_base_to_fp8: the unrounded base's
  std::string verifier_name_;                              // reward.verifier, or data.task's
  std::shared_ptr<reward::Verifier> verifier_;
  std::shared_ptr<rollout::ToolRunner> tools_;           // tools.functions: the tool workers
  std::unique_ptr<data::PromptFormatter> tool_prompts_;  // tools.functions: prompts rendering the tools
  RecordOrder order_;
  at::Generator sampling_;
  rollout::GenerateOptions gen_opts_;
  algo::PolicyLossOptions loss_opts_;
  SkipGuard skip_guard_;
  mutable StepProgress progress_;  // output only
  StartupClock* startup_ = nullptr;
  nlohmann::json startup_record_;
  RunDecisions decisions_;
  std::string pissa_start_checksum() const;  // of pissa_start_ (defined)
  const std::atomic<bool>* stop_flag_ = nullptr;
  std::function<void(const char* phase)> phase_end_;
  mutable std::set<std::string> reported_error_kinds_;  // reward_error kinds whose text the log has
  int64_t skipped_ = 0;
  int64_t total_opt_steps_ = 0;
};

}  // namespace unstuck::train
