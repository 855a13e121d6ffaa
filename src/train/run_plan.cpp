// plan_run(): a run's decisions and checks in the order the run meets them (model directory,
// tokenizer and config, device, data, memory, checkpoint, run directory, compute), then open_run().
#include "unstuck/train/run_plan.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>
#include <unistd.h>  // getpid

#include <optional>

#include "unstuck/common/error.h"
#include "unstuck/common/memory_usage.h"
#include "unstuck/common/parallel.h"
#include "unstuck/common/simd.h"
#include "unstuck/config/config.h"
#include "unstuck/config/unused_keys.h"
#include "unstuck/data/dataset.h"
#include "unstuck/dist/communicator.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors_dir.h"
#include "unstuck/log/logging.h"
#include "unstuck/model/lora.h"
#include "unstuck/model/param_layout.h"
#include "unstuck/reward/verifier.h"
#include "unstuck/rollout/sampler.h"
#include "unstuck/rollout/tools.h"
#include "train/base_weights.h"
#include "unstuck/train/checkpoint.h"
#include "unstuck/train/compute_choice.h"
#include "unstuck/train/grpo.h"
#include "unstuck/train/policy_dir.h"
#include "unstuck/train/torch_device.h"
#include "unstuck/train/trainable_weights.h"
#include "unstuck/train/weight_rounding.h"

namespace unstuck::train {
namespace {

// Bytes of a model directory's weight files (mapped while they load).
double weight_file_bytes(const std::filesystem::path& dir) {
  double bytes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") bytes += double(e.file_size(ec));
  return bytes;
}

// The tokenizer of a run, checked against the vocabulary (set from it when 0); then the config is
// validated with the final model shape and its context limits checked.
RunContext resolve_tokenizer(RunConfig& config, bool model_from_checkpoint, const std::filesystem::path& prompts_dir) {
  const std::filesystem::path tok_path = tokenizer_file(config);
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tok_path);
  if (config.model.vocab_size == 0) config.model.vocab_size = tok.vocab_size();
  // Real checkpoints may pad the embedding beyond the tokenizer (Qwen2.5: 151936 rows for 151665
  // tokens); a tokenizer with ids the model has no row for cannot work, and a model trained here
  // gets exactly the tokenizer's vocabulary.
  if (config.model.vocab_size < tok.vocab_size() ||
      (!model_from_checkpoint && config.model.vocab_size != tok.vocab_size()))
    throw UserError("model.vocab_size is " + std::to_string(config.model.vocab_size) + " but the tokenizer " +
                    tok_path.string() + " has " + std::to_string(tok.vocab_size()) +
                    " pieces (set model.vocab_size: 0 to take it from the tokenizer)");
  validate(config);
  check_limits(config);
  // chat_template: auto looks next to the tokenizer (its model directory), or in `prompts_dir`.
  const std::filesystem::path dir = !prompts_dir.empty()                      ? prompts_dir
                                    : std::filesystem::is_directory(tok_path) ? tok_path
                                                                              : tok_path.parent_path();
  data::PromptFormatter prompts(config.data, dir);
  return {run_dir(config), tok_path, std::move(tok), derive_seeds(config.run.seed), std::move(prompts), {}};
}

// The model directory's config.json sets the model shape (the training choice of activation
// checkpointing stays the config's).
model::HfConfig read_model_dir(const std::filesystem::path& dir, RunConfig& config) {
  model::HfConfig hf = model::read_hf_config(dir / "config.json");
  const bool activation_checkpointing = config.model.activation_checkpointing;
  config.model = hf.model;
  config.model.activation_checkpointing = activation_checkpointing;
  if (config.tokenizer.path.empty()) config.tokenizer.path = dir.string();  // tokenizer.json or tokenizer.model
  return hf;
}

// The weight files' tensor headers against config.json (no tensor data is read).
void check_weight_files(const RunPlan& plan) {
  const io::SafetensorsDir weights(plan.model_dir);
  model::check_weights_match(plan.hf.model, weights, (plan.model_dir / "config.json").string());
}

// Leaves nothing behind: a probe folder is made and removed in the nearest existing folder of
// `dir`, so the save at the end of training cannot fail for want of a place.
void check_writable_dir(const std::filesystem::path& dir, const char* key, const char* what = "the model directory",
                        const char* why = "the model is saved there at the end") {
  std::filesystem::path p = std::filesystem::absolute(dir);
  std::error_code ec;
  while (!std::filesystem::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  const std::filesystem::path probe = p / (".unstuck_write_probe_" + std::to_string(::getpid()));
  const bool ok = std::filesystem::is_directory(p, ec) && std::filesystem::create_directory(probe, ec) && !ec;
  std::filesystem::remove(probe, ec);
  if (!ok)
    throw UserError(std::string(key) + ": cannot write " + what + " '" + dir.string() + "' ('" + p.string() +
                    "' is not a writable folder); fix it before training, " + why);
}

PromptFit read_and_fit(const std::filesystem::path& file, const RunPlan& plan) {
  return fit_prompts(data::read_dataset(file, plan.config.data), plan.ctx.prompts, plan.ctx.tokenizer,
                     plan.max_prompt_tokens);
}

// The memory plan against this rank's limit (its GPU's free memory, or the machine's available
// memory and the cgroup's free part, which already leave out this process's baseline).
void plan_memory_of(RunPlan& plan, const MemoryPlanInputs& inputs) {
  MemoryPlanInputs in = inputs;
  in.gpu = plan.device.kind == DeviceKind::cuda;
  plan.limit = device_memory_limit(plan.device);
  if (plan.limit.bytes > 0) plan.limit.bytes += in.baseline_bytes;
  plan.memory = plan_memory(plan.config, plan.command, in);
  check_memory(plan.memory, plan.limit, [&] { return memory_knobs(plan.config, plan.command, in); });
}

// The GRPO data: records whose prompt fits; the longest kept prompt sizes the rows of the memory plan.
void plan_train_data(RunPlan& plan) {
  plan.train_file = data::train_file(plan.config.data);
  plan.test_file = data::test_file(plan.config.data);
  plan.train = read_and_fit(plan.train_file, plan);
  plan.test = read_and_fit(plan.test_file, plan);
  if (plan.train.lengths.empty()) throw UserError(plan.train_file.string() + ": no training records");
  if (plan.train.kept.empty()) report_prompt_fit(plan.train, plan.max_prompt_tokens, "train: training records");
  if (plan.test.kept.empty()) report_prompt_fit(plan.test, plan.max_prompt_tokens, "train: test records");
}

// precision.compute: auto is timed once (rank 0, then broadcast: every rank computes alike) or
// taken from the checkpoint being resumed, so a resume computes as the run it continues.
void plan_compute(RunPlan& plan, dist::Communicator& comm) {
  std::optional<precision::ComputeMode> recorded;
  if (plan.resumed && !plan.resumed->compute.empty())
    recorded = plan.resumed->compute == "fp32" ? precision::ComputeMode::fp32 : precision::ComputeMode::native;
  ComputeChoice choice;
  if (comm.rank() == 0)
    choice = resolve_compute(plan.config.model, plan.config.precision, torch_device(plan.device), recorded);
  if (comm.world_size() > 1) {
    int64_t mode = int64_t(choice.mode);
    comm.broadcast(&mode, 1, dist::DataType::i64, 0);
    choice.mode = precision::ComputeMode(mode);
  }
  plan.compute = choice.mode;
  plan.compute_choice = choice.to_json(plan.config.precision.compute);
}

// Elements of the trainable state (the checkpoint's buffers): the model's, or with LoRA the adapters'.
int64_t trainable_params(const RunConfig& config) {
  return config.lora.enabled() ? model::lora_layout(config.model, model::lora_spec(config.lora)).total
                               : model::llama_layout(config.model).total;
}

// Tools: their workers start and give the schemas, which every prompt then renders; a template whose
// tool calls cannot be read stops the run here.
void start_tools(RunPlan& plan) {
  if (!plan.config.tools.enabled()) return;
  plan.tools = std::make_shared<rollout::ToolRunner>(plan.config.tools);
  plan.ctx.prompts = plan.ctx.prompts.with_tools(plan.tools->schemas());
  rollout::tool_call_format(plan.ctx.prompts);
}

RunPlan plan_train(RunConfig cfg, const RunRequest& request, dist::Communicator& comm, StartupClock* clock) {
  const auto mark = [&](const char* stage) {
    if (clock) clock->mark(stage);
  };
  // The base policy fixes the model shape and the tokenizer; its config.json comes first, so the
  // memory plan is checked before the weights load.
  const std::filesystem::path base = cfg.grpo.base_model;
  if (base.empty() || !std::filesystem::is_directory(base))
    throw UserError("grpo.base_model must be a policy directory (an `unstuck sft` output), got '" + base.string() +
                    "'" + (base.empty() ? "" : " which is not a directory"));
  const RunConfig as_given = cfg;
  model::HfConfig hf = read_model_dir(base, cfg);
  refuse_unused_keys(as_given, "train", &hf.model, /*warn_only=*/!request.resume.empty());
  RunContext ctx = resolve_tokenizer(cfg, /*model_from_checkpoint=*/true, {});
  RunPlan plan("train", std::move(cfg), std::move(ctx));
  plan.model_dir = base;
  plan.hf = std::move(hf);
  plan.ctx.stop_ids = stop_token_ids(base, plan.hf.tokens.eos_ids, plan.ctx.tokenizer, plan.config.model.vocab_size);
  check_writable_dir(plan.ctx.run_dir, "run.output_dir", "the run directory",
                     "its config, metrics and checkpoints are written there from the first step");
  check_weight_files(plan);
  // LoRA: the targets and a starting adapter checked against this model before anything loads.
  if (plan.config.lora.enabled()) {
    model::lora_spec(plan.config.lora);
    if (!plan.config.grpo.base_adapter.empty()) read_base_adapter(plan.config);
  }
  mark("tokenizer and config");
  if (const std::string cpu_only = cpu_only_precision(plan.config.precision);
      !cpu_only.empty() && plan.device.kind != DeviceKind::cpu)
    throw UserError(cpu_only + ", and run.device resolves to " + plan.device.name() + ": set run.device: cpu");
  if (plan.config.rollout.decode == rollout::DecodeMode::graphs && plan.device.kind == DeviceKind::cpu)
    throw UserError("rollout.decode: graphs needs a GPU, and run.device " +
                    std::string(config::enum_name(plan.config.run.device)) +
                    " resolves to the CPU here; use "
                    "rollout.decode: auto (graphs on a GPU, dynamic steps on the CPU)");
  MemoryPlanInputs in;
  const double before_tools = double(descendants_rss_bytes());
  start_tools(plan);
  if (plan.tools) {  // their resident memory, measured here, is in the memory plan (other processes)
    in.tool_workers = plan.tools->workers();
    in.tool_worker_bytes = std::max(0.0, double(descendants_rss_bytes()) - before_tools);
  }
  mark("tools");
  // The data: prompts longer than max_seq_len - max_new_tokens are dropped and counted.
  plan_train_data(plan);
  mark("data");
  // reward.function / reward.command / the code verifier (or reward.terms with them) must prove they
  // can start before anything is written. `train` starts the run's workers here and keeps them for the
  // trainer (started once); a check starts one worker (one sandbox) and stops it. The workers'
  // resident memory, measured here, is in the memory plan (other processes on this machine).
  const reward::RewardConfig& rc = plan.config.reward;
  const std::string verifier = reward::verifier_name(rc, config::enum_name(plan.config.data.task));
  if (reward::scorer_can_fail(rc, verifier)) {
    const auto check_file = [](const std::string& path, const std::string& key) {
      if (!path.empty() && !std::filesystem::is_regular_file(path) && !reward::names_a_module(path))
        throw UserError(key + ": no such file '" + path + "'");
    };
    check_file(rc.function.path, "reward.function.path");
    for (std::size_t i = 0; i < rc.terms.size(); ++i)
      check_file(rc.terms[i].function.path, "reward.terms[" + std::to_string(i) + "].function.path");
    in.reward_workers = reward::scorer_workers(rc);
    const double before = double(descendants_rss_bytes());
    if (request.keep_scorer) {
      plan.scorer = reward::make_verifier(verifier, rc);
      in.reward_worker_bytes = std::max(0.0, double(descendants_rss_bytes()) - before);
    } else {
      reward::RewardConfig probe = rc;
      probe.function.workers = 1;
      probe.code.workers = 1;
      for (reward::RewardTerm& t : probe.terms) t.function.workers = 1;
      const auto started = reward::make_verifier(verifier, probe);
      const int64_t probes = reward::scorer_workers(probe);  // one per function or command
      if (probes > 0)
        in.reward_worker_bytes =
            std::max(0.0, double(descendants_rss_bytes()) - before) / double(probes) * double(in.reward_workers);
    }
    mark("reward scorer");
  }
  // Memory, sized by the longest prompt kept (GRPO rows are that plus rollout.max_new_tokens).
  in.longest_prompt = std::min(plan.max_prompt_tokens, std::max(plan.train.longest, plan.test.longest));
  in.baseline_bytes = plan.device.kind == DeviceKind::cpu ? double(current_rss_bytes()) : 0.0;
  plan.weight_file_bytes = weight_file_bytes(base);
  in.weight_file_bytes = plan.weight_file_bytes;
  plan_memory_of(plan, in);
  // The checkpoint to resume: its contents checked against this model and data.
  if (!request.resume.empty()) {
    plan.resume_checkpoint = resolve_resume_checkpoint(request.resume);
    auto state = std::make_shared<TrainerState>(load_checkpoint(plan.resume_checkpoint, CheckpointBuffers::defer));
    check_checkpoint_fits(*state, trainable_params(plan.config), plan.train.kept.size(), plan.resume_checkpoint);
    plan.resumed = std::move(state);
    mark("checkpoint");
  } else if (!latest_checkpoint(plan.ctx.run_dir / "checkpoints").empty()) {
    throw UserError("run directory " + plan.ctx.run_dir.string() +
                    " already holds checkpoints of an earlier run; continue it with `unstuck train --resume " +
                    plan.ctx.run_dir.string() + "` or pick another run.name");
  }
  plan_compute(plan, comm);
  return plan;
}

RunPlan plan_sft(RunConfig cfg) {
  if (cfg.lora.enabled())
    throw UserError(
        "lora.rank is " + std::to_string(cfg.lora.rank) +
        ": LoRA trains with `unstuck train` (GRPO); `unstuck sft` trains every parameter (set lora.rank: 0)");
  RunContext ctx = resolve_tokenizer(cfg, /*model_from_checkpoint=*/false, {});
  RunPlan plan("sft", std::move(cfg), std::move(ctx));
  const RunConfig& c = plan.config;
  const tokenizer::Tokenizer& tok = plan.ctx.tokenizer;
  plan.ctx.stop_ids = {tok.eos_id()};  // the completions it trains on end with the EOS
  plan.train_file = data::train_file(c.data);
  plan.test_file = data::test_file(c.data);
  const std::vector<data::TaskRecord> train = data::read_dataset(plan.train_file, c.data);
  for (std::size_t i = 0; i < train.size(); ++i) {
    SftExample e{prompt_ids(train[i], plan.ctx.prompts, tok), tok.encode(data::format_completion(train[i], c.data))};
    e.completion.push_back(tok.eos_id());
    if (int64_t(e.prompt.size() + e.completion.size()) > c.model.max_seq_len)
      throw UserError(plan.train_file.string() + " record " + std::to_string(i + 1) + ": " +
                      std::to_string(e.prompt.size() + e.completion.size()) + " tokens exceed model.max_seq_len (" +
                      std::to_string(c.model.max_seq_len) + ")");
    plan.sft_examples.push_back(std::move(e));
  }
  if (plan.sft_examples.empty()) throw UserError(plan.train_file.string() + ": no training records");
  std::vector<data::TaskRecord> test = data::read_dataset(plan.test_file, c.data);
  if (c.sft.eval_samples > 0 && int64_t(test.size()) > c.sft.eval_samples) test.resize(std::size_t(c.sft.eval_samples));
  // What would fail at the first evaluation or at the save fails now, not after training.
  plan.test = fit_prompts(std::move(test), plan.ctx.prompts, tok, plan.max_prompt_tokens);
  if (plan.test.kept.empty()) report_prompt_fit(plan.test, plan.max_prompt_tokens, "sft: test records");
  plan.sft_model_dir = c.sft.output.empty() ? plan.ctx.run_dir / "model" : std::filesystem::path(c.sft.output);
  check_writable_dir(plan.sft_model_dir, c.sft.output.empty() ? "run.output_dir" : "sft.output");
  plan_memory_of(plan, {});
  const ComputeChoice choice = resolve_compute(c.model, c.precision, torch_device(plan.device), std::nullopt);
  plan.compute = choice.mode;
  plan.compute_choice = choice.to_json(c.precision.compute);
  return plan;
}

RunPlan plan_eval(RunConfig cfg, const RunRequest& request) {
  const std::filesystem::path& dir = request.model_dir;
  if (!std::filesystem::is_directory(dir)) throw UserError("model directory '" + dir.string() + "' does not exist");
  cfg.tokenizer.path = dir.string();  // the model directory's tokenizer.json, else tokenizer.model
  model::HfConfig hf = read_model_dir(dir, cfg);
  RunContext ctx = resolve_tokenizer(cfg, /*model_from_checkpoint=*/true, dir);
  RunPlan plan("eval", std::move(cfg), std::move(ctx));
  plan.model_dir = dir;
  plan.hf = std::move(hf);
  plan.ctx.stop_ids = stop_token_ids(dir, plan.hf.tokens.eos_ids, plan.ctx.tokenizer, plan.config.model.vocab_size);
  check_weight_files(plan);
  plan.test_file = request.split == "test" ? data::test_file(plan.config.data) : data::train_file(plan.config.data);
  start_tools(plan);  // a model trained with tools is evaluated with them
  std::vector<data::TaskRecord> records = data::read_dataset(plan.test_file, plan.config.data);
  if (request.samples > 0 && int64_t(records.size()) > request.samples) records.resize(std::size_t(request.samples));
  plan.test = fit_prompts(std::move(records), plan.ctx.prompts, plan.ctx.tokenizer, plan.max_prompt_tokens);
  if (plan.test.kept.empty()) report_prompt_fit(plan.test, plan.max_prompt_tokens, "eval");
  plan.weight_file_bytes = weight_file_bytes(dir);
  MemoryPlanInputs in;
  in.weight_file_bytes = plan.weight_file_bytes;
  plan_memory_of(plan, in);
  return plan;
}

nlohmann::json fit_json(const PromptFit& fit, const std::filesystem::path& file) {
  return {{"file", file.string()},
          {"records", fit.lengths.size()},
          {"kept", fit.kept.size()},
          {"dropped", fit.dropped},
          {"longest_prompt_tokens", fit.longest}};
}

nlohmann::json memory_json(const MemoryPlan& plan, const MemoryLimit& limit) {
  nlohmann::json parts = nlohmann::json::array(), phases = nlohmann::json::object();
  for (const MemoryPart& p : plan.parts)
    parts.push_back({{"what", p.what},
                     {"phase", p.phase.empty() ? "held" : p.phase},
                     {"bytes", p.bytes},
                     {"keys", p.keys},
                     {"knob", p.knob},
                     {"host", !plan.on_device(p)},
                     {"other_process", p.other_process}});
  for (const std::string& ph : plan.phases()) phases[ph] = plan.phase_peak(ph);
  return {{"peak_bytes", plan.peak()},
          {"peak_phase", plan.peak_phase()},
          {"held_bytes", plan.held()},
          {"host_bytes", plan.host_bytes()},
          {"other_process_bytes", plan.other_process_bytes()},
          {"baseline_bytes", plan.baseline},
          {"phase_peak_bytes", phases},
          {"parts", parts},
          {"limit_bytes", limit.bytes},
          {"limit", limit.where},
          {"ranks_sharing_limit", limit.ranks}};
}

std::string fit_line(const PromptFit& fit, const std::filesystem::path& file, int64_t max_prompt_tokens) {
  return fmt::format("{} of {} records of {} ({} dropped for a prompt over {} tokens; longest prompt {})",
                     fit.kept.size(), fit.lengths.size(), file.string(), fit.dropped, max_prompt_tokens, fit.longest);
}

// Lines after the first indented by `pad` (a multi-line report inside the plan's block).
std::string indented(std::string text, const std::string& pad) {
  for (std::size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1))
    text.insert(at + 1, pad);
  return text;
}

}  // namespace

RunPlan::RunPlan(std::string command_in, RunConfig config_in, RunContext ctx_in)
    : command(std::move(command_in)), config(std::move(config_in)), ctx(std::move(ctx_in)) {
  device = rank_device(config);
  threads = resolve_threads(config.precision.threads);
  max_prompt_tokens = config.model.max_seq_len - config.rollout.max_new_tokens;
}

// The run's decisions (RunDecisions) from its resolved config, compute mode and device.
RunDecisions decide(const RunPlan& plan, const dist::Communicator& comm) {
  const RunConfig& c = plan.config;
  RunDecisions d;
  d.compute_weights_dtype = c10::toString(compute_dtype(precision::round_mode_for(c.precision.mode)));
  d.forward_dtype =
      c10::toString(forward_dtype(with_compute(c.precision, plan.compute), plan.device.kind == DeviceKind::cuda));
  d.dist_backend = comm.backend_name();
  if (plan.command != "train") return d;
  const config::GrpoConfig& g = c.grpo;
  // The reference is the start policy in the forward dtype (with LoRA the frozen base, held so).
  if (g.needs_reference()) d.reference_dtype = d.forward_dtype;
  d.decode = rollout::resolve_decode_mode(c.rollout.decode, torch_device(plan.device), /*use_cache=*/true);
  d.measure_apart = g.ppo_epochs != 1 || g.minibatches != 1 || c.lora.dropout > 0;
  return d;
}

RunPlan plan_run(RunConfig config, const RunRequest& request, dist::Communicator& comm, StartupClock* clock) {
  if (request.command != "train" && request.command != "sft" && request.command != "eval")
    throw UserError("plan_run: unknown command '" + request.command + "' (train, sft or eval)");
  // Silence is refused first: a key this command does not read is named before anything runs
  // (train: once the base model's config.json is read, in plan_train).
  if (request.command == "sft") refuse_unused_keys(config, request.command);
  // libtorch's threads first: the compute probe (train, sft) times the matmuls on them.
  at::set_num_threads(resolve_threads(config.precision.threads));
  RunPlan plan = request.command == "train" ? plan_train(std::move(config), request, comm, clock)
                 : request.command == "sft" ? plan_sft(std::move(config))
                                            : plan_eval(std::move(config), request);
  plan.rank = comm.rank();
  plan.world = comm.world_size();
  if (plan.command != "eval") plan.decisions = decide(plan, comm);
  return plan;
}

nlohmann::json RunDecisions::to_json() const {
  return {{"compute_weights_dtype", compute_weights_dtype},
          {"forward_dtype", forward_dtype},
          {"reference_dtype", reference_dtype},
          {"decode", config::enum_name(decode)},
          {"measure_apart", measure_apart},
          {"dist_backend", dist_backend}};
}

nlohmann::json RunPlan::to_json() const {
  const Seeds& s = ctx.seeds;
  nlohmann::json data{{"max_prompt_tokens", max_prompt_tokens}};
  if (command == "train") data["train"] = fit_json(train, train_file);
  if (command == "sft") data["train"] = {{"file", train_file.string()}, {"records", sft_examples.size()}};
  data[command == "eval" ? "scored" : "test"] = fit_json(test, test_file);
  nlohmann::json j{{"command", command},
                   {"device", device.name()},
                   {"threads", threads},
                   {"rank", rank},
                   {"world_size", world},
                   {"precision_mode", config::enum_name(config.precision.mode)},
                   {"model",
                    {{"dir", model_dir.string()},
                     {"family", config::enum_name(config.model.family)},
                     {"params", model::llama_layout(config.model).total},
                     {"vocab_size", config.model.vocab_size},
                     {"layers", config.model.n_layers},
                     {"max_seq_len", config.model.max_seq_len}}},
                   {"tokenizer", ctx.tokenizer_path.string()},
                   {"data", data},
                   {"stop_token_ids", ctx.stop_ids},
                   {"seeds",
                    {{"run", config.run.seed},
                     {"data", s.data},
                     {"init", s.init},
                     {"sampling", s.sampling},
                     {"rounding", s.rounding},
                     {"dropout", s.dropout}}},
                   {"memory", memory_json(memory, limit)}};
  if (command != "eval") j["compute"] = compute_choice;
  if (command != "eval") j["decisions"] = decisions.to_json();
  if (!resume_checkpoint.empty()) j["resume_checkpoint"] = resume_checkpoint.string();
  if (command == "train" && config.lora.enabled())
    j["lora"] = {{"rank", config.lora.rank},
                 {"alpha", config.lora.alpha},
                 {"rslora", config.lora.rslora},
                 {"dropout", config.lora.dropout},
                 {"target_modules", config.lora.target_modules},
                 {"trainable_params", trainable_params(config)},
                 {"start", config.grpo.base_adapter.empty() ? std::string(config::enum_name(config.lora.init))
                                                            : config.grpo.base_adapter}};
  if (command == "sft") j["model_output"] = sft_model_dir.string();
  return j;
}

std::string RunPlan::describe() const {
  const model::ModelConfig& m = config.model;
  std::string out = command + ": plan\n";
  const auto line = [&](const char* what, const std::string& text) { out += fmt::format("  {:<10} {}\n", what, text); };
  line("model", fmt::format("{}{} ({} params, {} layers, vocabulary {}, context {})",
                            model_dir.empty() ? "new, " : model_dir.string() + ", ", config::enum_name(m.family),
                            model::llama_layout(m).total, m.n_layers, m.vocab_size, m.max_seq_len));
  line("tokenizer", ctx.tokenizer_path.string() + "; prompts from " + ctx.prompts.describe());
  std::string compute_text = config::enum_name(config.precision.mode);
  if (command != "eval")
    compute_text +=
        fmt::format(", compute {} ({})", config::enum_name(compute), compute_choice.value("reason", std::string()));
  line("device",
       fmt::format("{}, {} thread(s), rank {} of {}; precision {}", device.name(), threads, rank, world, compute_text));
  if (command != "eval") {
    const RunDecisions& d = decisions;
    std::string text = "compute weights " + d.compute_weights_dtype + ", forward " + d.forward_dtype;
    if (command == "train")
      text += ", reference " + d.reference_dtype + ", decode " + config::enum_name(d.decode) + ", policy measured " +
              (d.measure_apart ? "in its own pass" : "by the update's forward");
    line("computes", text + "; " + d.dist_backend + " backend");
  }
  if (command == "train") line("train data", fit_line(train, train_file, max_prompt_tokens));
  if (command == "sft") line("train data", fmt::format("{} records of {}", sft_examples.size(), train_file.string()));
  line(command == "eval" ? "scored" : "test data", fit_line(test, test_file, max_prompt_tokens));
  line("stop ids", nlohmann::json(ctx.stop_ids).dump());
  const Seeds& s = ctx.seeds;
  line("seeds", fmt::format("run.seed {}: data {}, init {}, sampling {}, rounding {}", config.run.seed, s.data, s.init,
                            s.sampling, s.rounding));
  if (command == "train" && config.lora.enabled()) {
    const model::LoraConfig& l = config.lora;
    std::string targets;
    for (const std::string& t : l.target_modules) targets += (targets.empty() ? "" : ", ") + t;
    const int64_t n = trainable_params(config), all = model::llama_layout(m).total;
    const std::string start =
        !config.grpo.base_adapter.empty() ? config.grpo.base_adapter
        : l.init == model::LoraInit::pissa
            ? "pissa (A, B from each adapted matrix's top-" + std::to_string(l.rank) + " singular vectors by " +
                  (l.pissa_niter > 0 ? "a randomized SVD with " + std::to_string(l.pissa_niter) + " subspace iterations"
                                     : std::string("a full SVD")) +
                  "; the frozen base is the residual, the reference the start policy)"
            : std::string(config::enum_name(l.init)) + " A, B = 0";
    line("lora", fmt::format("rank {}, alpha {}{}{} on [{}]: {} trainable adapter params ({:.2f}% of the model), the "
                             "base frozen in the compute dtype and the reference; start: {}",
                             l.rank, config::format_double(l.alpha), l.rslora ? " (rsLoRA)" : "",
                             l.dropout > 0 ? ", dropout " + config::format_double(l.dropout) : std::string(), targets,
                             n, 100.0 * double(n) / double(all), start));
  }
  if (!resume_checkpoint.empty()) line("resume", resume_checkpoint.string());
  if (command == "sft") line("output", sft_model_dir.string());
  if (command != "eval") line("run dir", ctx.run_dir.string());
  line("memory", fmt::format("limit {}; {}", limit.bytes > 0 ? limit.where : std::string("unknown"),
                             indented(memory_report(memory), "             ")));
  return out;
}

void open_run(RunPlan& plan) {
  RunContext& ctx = plan.ctx;
  const RunConfig& config = plan.config;
  if (plan.rank > 0) {
    setup_logging(std::max(config.run.log_level, LogLevel::warn));
    spdlog::set_pattern("[rank " + std::to_string(plan.rank) + "] %^%l%$: %v");
  } else {
    ctx.run_dir = prepare_run_dir(config);
    setup_logging(config.run.log_level, ctx.run_dir / (plan.command + ".log"));
    nlohmann::json run{{"command", plan.command},
                       {"unstuck_version", UNSTUCK_VERSION},
                       {"libtorch_version", TORCH_VERSION},
                       {"seed", config.run.seed},
                       {"precision_mode", config::enum_name(config.precision.mode)},
                       {"precision_compute", config::enum_name(config.precision.compute)},
                       {"cpu_simd", simd_level_name(detect_simd_level())},
                       {"threads", plan.threads},
                       {"device", plan.device.name()},
                       {"compute_choice", plan.compute_choice},
                       {"stop_token_ids", ctx.stop_ids},
                       {"world_size", plan.world},
                       {"memory_plan", memory_json(plan.memory, plan.limit)},
                       {"plan", plan.to_json()}};
    if (plan.command != "eval") {  // the precision and backend the run uses, as the plan decided them
      const RunDecisions& d = plan.decisions;
      run["compute_weights_dtype"] = d.compute_weights_dtype;
      run["forward_dtype"] = d.forward_dtype;
      if (plan.command == "train") run["reference_dtype"] = d.reference_dtype;
      run["dist_backend"] = d.dist_backend;
    }
    io::write_json_file(ctx.run_dir / "run.json", run);
  }
  const std::string block = plan.describe();
  spdlog::info("{}", block.substr(0, block.size() - 1));  // without its last newline
  if (plan.command == "train") report_prompt_fit(plan.train, plan.max_prompt_tokens, "train: training records");
  report_prompt_fit(plan.test, plan.max_prompt_tokens, plan.command + ": test records");
}

}  // namespace unstuck::train
