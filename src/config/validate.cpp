// validate(RunConfig): the one place where value ranges and combinations are checked. Each check
// names the dotted key, the rule and the value found, e.g. "optim.lr must be > 0, got -1".
#include <cmath>
#include <filesystem>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/config/run_config.h"
#include "unstuck/model/param_layout.h"
#include "unstuck/reward/function_config.h"

namespace unstuck {
namespace {

// Upper bounds of counts that size a thread pool or a buffer directly; larger values are typos
// (1e8 threads, a 1e9-token completion) that would only fail deep inside an allocation.
constexpr int kMaxThreads = 4096;
constexpr int64_t kMaxTokens = model::kMaxSeqLen;  // model.max_seq_len, rollout.max_new_tokens
// Loss weights beyond this make one term the whole loss, and 1e300 overflows it to inf, which the
// run would only report as a non-finite gradient.
constexpr double kMaxCoef = 1000;

std::string shown(double x) {
  std::string text = config::format_double(x);
  if (text.size() > 2 && text.compare(text.size() - 2, 2, ".0") == 0) text.resize(text.size() - 2);
  return text;
}

void require(bool ok, const char* key, const char* rule, const std::string& got) {
  if (!ok) throw UserError(std::string(key) + " must be " + rule + ", got " + got);
}
void require(bool ok, const char* key, const std::string& rule, const std::string& got) {
  require(ok, key, rule.c_str(), got);
}
void require(bool ok, const char* key, const char* rule, double got) { require(ok, key, rule, shown(got)); }

// Every number of the config is finite: YAML's .inf / .nan in any key is refused by that key's
// name before its own range is checked (a NaN fails every comparison, an infinity only some).
void require_finite(const config::Field& section, const std::string& prefix) {
  for (const config::Field& f : section.children) {
    const std::string key = prefix.empty() ? f.name : prefix + "." + f.name;
    if (f.kind == config::Kind::section) {
      require_finite(f, key);
    } else if (f.kind == config::Kind::section_list) {
      for (std::size_t i = 0; i < f.size(); ++i) require_finite(f.element(i), key + "[" + std::to_string(i) + "]");
    } else if (f.kind == config::Kind::real) {
      const double x = std::get<double>(f.get());
      require(std::isfinite(x), key.c_str(), "a finite number", x);
    } else if (f.kind == config::Kind::real_list) {
      const auto xs = std::get<std::vector<double>>(f.get());
      for (std::size_t i = 0; i < xs.size(); ++i)
        require(std::isfinite(xs[i]), (key + "[" + std::to_string(i) + "]").c_str(), "a finite number", xs[i]);
    }
  }
}

void validate_run(const RunOptions& run) {
  const bool plain_name =
      !run.name.empty() && run.name != "." && run.name != ".." && run.name.find_first_of("/\\") == std::string::npos;
  bool printable = true;  // a NUL or a control character would mangle or hide the directory name
  for (const char c : run.name) printable = printable && (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f);
  std::string shown_name;
  for (const char c : run.name) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f)
      shown_name += c;
    else
      shown_name += "\\x" + std::string(1, "0123456789abcdef"[u >> 4]) + "0123456789abcdef"[u & 15];
  }
  require(plain_name, "run.name", "a plain folder name (not empty, no '/')", "'" + shown_name + "'");
  require(printable, "run.name", "a folder name without control characters (NUL, newline, ...)",
          "'" + shown_name + "'");
  require(!run.output_dir.empty(), "run.output_dir", "a folder path", "''");
}

void validate_loss_scale(const precision::LossScaleConfig& ls) {
  require(std::isfinite(ls.min_scale) && ls.min_scale > 0, "precision.loss_scale.min_scale", "a finite number > 0",
          ls.min_scale);
  require(std::isfinite(ls.max_scale) && ls.max_scale >= ls.min_scale, "precision.loss_scale.max_scale",
          "finite and >= precision.loss_scale.min_scale", ls.max_scale);
  require(ls.initial_scale >= ls.min_scale && ls.initial_scale <= ls.max_scale, "precision.loss_scale.initial_scale",
          "within [min_scale, max_scale]", ls.initial_scale);
  require(std::isfinite(ls.growth_factor) && ls.growth_factor > 1, "precision.loss_scale.growth_factor",
          "a finite number > 1", ls.growth_factor);
  require(ls.backoff_factor > 0 && ls.backoff_factor < 1, "precision.loss_scale.backoff_factor", "in (0, 1)",
          ls.backoff_factor);
  require(ls.growth_interval >= 1, "precision.loss_scale.growth_interval", ">= 1", std::to_string(ls.growth_interval));
  require(ls.max_consecutive_skips >= 0, "precision.loss_scale.max_consecutive_skips", ">= 0 (0 = never stop)",
          std::to_string(ls.max_consecutive_skips));
  require(ls.hysteresis >= 1, "precision.loss_scale.hysteresis", ">= 1", std::to_string(ls.hysteresis));
}

void validate_precision(const precision::PrecisionConfig& p) {
  require(p.threads >= 0 && p.threads <= kMaxThreads, "precision.threads",
          "in [0, " + std::to_string(kMaxThreads) + "] (0 = all cores)", std::to_string(p.threads));
  require(p.analog_mantissa_bits >= 0 && p.analog_mantissa_bits <= 6, "precision.analog_mantissa_bits",
          "in [0, 6] (0 = off; BF16 itself has 7)", std::to_string(p.analog_mantissa_bits));
  require(p.analog_mantissa_bits == 0 || !precision::is_fp8(p.mode), "precision.analog_mantissa_bits",
          std::string("0 with precision.mode ") + config::enum_name(p.mode) + " (FP8 is a real format on its own grid)",
          std::to_string(p.analog_mantissa_bits));
  validate_loss_scale(p.loss_scale);
}

void validate_optim(const precision::OptimConfig& o) {
  require(std::isfinite(o.lr) && o.lr > 0, "optim.lr", "> 0", o.lr);
  require(o.beta1 >= 0 && o.beta1 < 1, "optim.beta1", "in [0, 1)", o.beta1);
  require(o.beta2 >= 0 && o.beta2 < 1, "optim.beta2", "in [0, 1)", o.beta2);
  require(std::isfinite(o.eps) && o.eps > 0, "optim.eps", "> 0", o.eps);
  require(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "optim.weight_decay", ">= 0", o.weight_decay);
  require(std::isfinite(o.grad_clip) && o.grad_clip >= 0, "optim.grad_clip", ">= 0 (0 = off)", o.grad_clip);
}

void validate_model(model::ModelConfig m) {
  require(m.vocab_size >= 0, "model.vocab_size", ">= 0 (0 = from the tokenizer)", std::to_string(m.vocab_size));
  require(m.max_seq_len <= kMaxTokens, "model.max_seq_len", "<= " + std::to_string(kMaxTokens),
          std::to_string(m.max_seq_len));
  if (m.vocab_size == 0) m.vocab_size = 1;  // filled in from the tokenizer later
  model::validate_model_config(m);
}

void validate_rollout(const rollout::SamplingConfig& r) {
  require(std::isfinite(r.temperature) && r.temperature >= 0, "rollout.temperature", ">= 0 (0 = greedy)",
          r.temperature);
  require(r.top_k >= 0, "rollout.top_k", ">= 0 (0 = off)", std::to_string(r.top_k));
  require(r.top_p > 0 && r.top_p <= 1, "rollout.top_p", "in (0, 1]", r.top_p);
  require(r.max_new_tokens >= 1 && r.max_new_tokens <= kMaxTokens, "rollout.max_new_tokens",
          "in [1, " + std::to_string(kMaxTokens) + "]", std::to_string(r.max_new_tokens));
}

void validate_lr_schedule(const config::LrScheduleConfig& s, const std::string& section) {
  const std::string warmup = section + ".warmup_steps", floor = section + ".min_lr_ratio";
  require(s.warmup_steps >= 0, warmup.c_str(), ">= 0", std::to_string(s.warmup_steps));
  require(s.min_lr_ratio >= 0 && s.min_lr_ratio <= 1, floor.c_str(), "in [0, 1]", s.min_lr_ratio);
}

void validate_sft(const config::SftConfig& s) {
  require(s.steps >= 1, "sft.steps", ">= 1", std::to_string(s.steps));
  require(s.batch_size >= 1, "sft.batch_size", ">= 1", std::to_string(s.batch_size));
  validate_lr_schedule(s.lr, "sft");
  require(s.log_every >= 1, "sft.log_every", ">= 1", std::to_string(s.log_every));
  require(s.eval_every >= 0, "sft.eval_every", ">= 0 (0 = at the end only)", std::to_string(s.eval_every));
  require(s.eval_samples >= 0, "sft.eval_samples", ">= 0 (0 = all)", std::to_string(s.eval_samples));
}

void validate_grpo(const config::GrpoConfig& g) {
  require(g.steps >= 1, "grpo.steps", ">= 1", std::to_string(g.steps));
  require(g.prompts_per_step >= 1, "grpo.prompts_per_step", ">= 1", std::to_string(g.prompts_per_step));
  require(g.group_size >= 2, "grpo.group_size", ">= 2 (advantages compare completions of a prompt)",
          std::to_string(g.group_size));
  require(g.minibatches >= 1 && g.minibatches <= g.prompts_per_step * g.group_size, "grpo.minibatches",
          "in [1, prompts_per_step * group_size]", std::to_string(g.minibatches));
  require(g.ppo_epochs >= 1, "grpo.ppo_epochs", ">= 1", std::to_string(g.ppo_epochs));
  require(g.clip_low > 0 && g.clip_low < 1, "grpo.clip_low", "in (0, 1)", g.clip_low);
  const std::string coef_range = "in [0, " + shown(kMaxCoef) + "]";
  require(g.kl_coef >= 0 && g.kl_coef <= kMaxCoef, "grpo.kl_coef", coef_range + " (0 = off)", shown(g.kl_coef));
  require(g.entropy_coef >= 0 && g.entropy_coef <= kMaxCoef, "grpo.entropy_coef", coef_range + " (0 = off)",
          shown(g.entropy_coef));
  require(g.clip_high > 0 && g.clip_high <= kMaxCoef, "grpo.clip_high", "in (0, " + shown(kMaxCoef) + "]",
          shown(g.clip_high));
  require(g.clip_ratio_c == 0 || (g.clip_ratio_c > 1 && g.clip_ratio_c <= kMaxCoef), "grpo.clip_ratio_c",
          "0 (off) or in (1, " + shown(kMaxCoef) + "]", shown(g.clip_ratio_c));
  require(g.advantage != algo::AdvantageMode::mean_only || g.scale_rewards == algo::RewardScale::auto_ ||
              g.scale_rewards == algo::RewardScale::none,
          "grpo.scale_rewards",
          "auto or none with grpo.advantage: mean_only (which divides by nothing; for a scale "
          "use grpo.advantage: grpo)",
          "'" + std::string(config::enum_name(g.scale_rewards)) + "'");
  require(g.oversample >= 0 && g.oversample <= 100, "grpo.oversample", "in [0, 100]", std::to_string(g.oversample));
  require(g.oversample == 0 || g.filter_groups != algo::GroupFilter::none, "grpo.oversample",
          "0 unless grpo.filter_groups drops groups (nothing to refill)", std::to_string(g.oversample));
  require(g.kl_in == algo::KlIn::loss || g.kl_coef > 0, "grpo.kl_in",
          "loss unless grpo.kl_coef > 0 (reward with kl_coef 0 subtracts nothing)", "'reward'");
  require(g.tis_cap == 0 || (g.tis_cap >= 1 && g.tis_cap <= kMaxCoef), "grpo.tis_cap",
          "0 (off) or in [1, " + shown(kMaxCoef) + "]", shown(g.tis_cap));
  validate_lr_schedule(g.lr, "grpo");
  require(g.eval_every >= 0, "grpo.eval_every", ">= 0", std::to_string(g.eval_every));
  require(g.log_rollouts_every >= 0, "grpo.log_rollouts_every", ">= 0 (0 = never)",
          std::to_string(g.log_rollouts_every));
  require(g.eval_samples >= 0, "grpo.eval_samples", ">= 0", std::to_string(g.eval_samples));
  require(g.checkpoint_every >= 0, "grpo.checkpoint_every", ">= 0", std::to_string(g.checkpoint_every));
  require(g.keep_checkpoints >= 1, "grpo.keep_checkpoints", ">= 1", std::to_string(g.keep_checkpoints));
  require(g.ref_metrics_every >= 0, "grpo.ref_metrics_every", ">= 0", std::to_string(g.ref_metrics_every));
  require(g.logprob_chunk_rows >= 0, "grpo.logprob_chunk_rows", ">= 0", std::to_string(g.logprob_chunk_rows));
  require(g.logprob_chunk_tokens >= 0, "grpo.logprob_chunk_tokens", ">= 0", std::to_string(g.logprob_chunk_tokens));
}

void validate_offload(const RunConfig& config) {
  const precision::PrecisionConfig& p = config.precision;
  if (p.offload == precision::Offload::none) return;
  const precision::RoundMode mode = precision::round_mode_for(p.mode);
  require(!precision::is_fp8(p.mode) && mode != precision::RoundMode::fp32, "precision.mode",
          "fp16, bf16, bf16_sr or fp16_sr with precision.offload: optimizer (fp32 keeps one buffer for master and "
          "compute weights; FP8 channel scales are not offloaded)",
          std::string(config::enum_name(p.mode)));
  require(config.lora.rank == 0, "lora.rank", "0 with precision.offload: optimizer (the adapters' state is small)",
          std::to_string(config.lora.rank));
  require(p.analog_mantissa_bits == 0, "precision.analog_mantissa_bits", "0 with precision.offload: optimizer",
          std::to_string(p.analog_mantissa_bits));
}

void validate_lora(const model::LoraConfig& l, const RunConfig& config) {
  require(l.rank >= 0 && l.rank <= 65536, "lora.rank", "in [0, 65536] (0 = full-parameter training)",
          std::to_string(l.rank));
  if (!l.enabled()) {
    require(config.grpo.base_adapter.empty(), "grpo.base_adapter", "empty unless lora.rank > 0 (it holds adapters)",
            "'" + config.grpo.base_adapter + "'");
    return;
  }
  require(l.alpha > 0 && l.alpha <= 1e6, "lora.alpha", "in (0, 1e6]", l.alpha);
  require(l.dropout >= 0 && l.dropout < 1, "lora.dropout", "in [0, 1)", l.dropout);
  require(l.init != model::LoraInit::pissa || config.grpo.base_adapter.empty(), "lora.init",
          "kaiming or gaussian with grpo.base_adapter (the adapter is the start; PiSSA derives its own from the base)",
          "pissa");
  require(l.pissa_niter >= 0 && l.pissa_niter <= 64, "lora.pissa_niter", "in [0, 64] (0 = a full SVD)",
          std::to_string(l.pissa_niter));
  require(l.pissa_niter == 0 || l.init == model::LoraInit::pissa, "lora.pissa_niter",
          "0 unless lora.init is pissa (it sets how PiSSA's SVD is computed)", std::to_string(l.pissa_niter));
  static const char* kNames[] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  require(!l.target_modules.empty(), "lora.target_modules", "a non-empty list of projections", "[]");
  for (std::size_t i = 0; i < l.target_modules.size(); ++i) {
    const std::string& t = l.target_modules[i];
    bool known = false;
    for (const char* n : kNames) known = known || t == n;
    require(known, ("lora.target_modules[" + std::to_string(i) + "]").c_str(),
            "one of q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj", "'" + t + "'");
    for (std::size_t j = 0; j < i; ++j)
      require(l.target_modules[j] != t, ("lora.target_modules[" + std::to_string(i) + "]").c_str(),
              "a projection not named before", "'" + t + "' again");
  }
  require(!precision::is_fp8(config.precision.mode), "precision.mode",
          "fp32, fp16, fp16_sr, bf16 or bf16_sr with lora.rank > 0 (FP8 adapters are not supported)",
          "'" + std::string(config::enum_name(config.precision.mode)) + "'");
}

void validate_dist(const dist::DistConfig& d) {
  require(std::isfinite(d.timeout_s) && d.timeout_s > 0, "dist.timeout_s", "a finite number of seconds > 0",
          d.timeout_s);
}

void require_tools(bool ok, const std::string& key, const std::string& what, const std::string& got) {
  if (!ok) throw UserError("tools." + key + " must be " + what + ", got " + got);
}

void validate_tools(const rollout::ToolsConfig& c) {
  require_tools(c.max_iterations >= 0, "max_iterations", ">= 0 (0: no limit but the tokens)",
                std::to_string(c.max_iterations));
  require_tools(c.workers >= 1 && c.workers <= 64, "workers", "in [1, 64]", std::to_string(c.workers));
  require_tools(c.timeout_s > 0 && c.timeout_s <= 86400, "timeout_s", "in (0, 86400]", std::to_string(c.timeout_s));
  require_tools(c.start_timeout_s > 0 && c.start_timeout_s <= 86400, "start_timeout_s", "in (0, 86400]",
                std::to_string(c.start_timeout_s));
  require_tools(c.memory_mb >= 0, "memory_mb", ">= 0 (0: no limit)", std::to_string(c.memory_mb));
  for (std::size_t i = 0; i < c.functions.size(); ++i) {
    const rollout::ToolSpec& t = c.functions[i];
    const std::string key = "functions[" + std::to_string(i) + "]";
    require_tools(!t.path.empty(), key + ".path", "a Python file or module", "nothing");
    require_tools(!t.name.empty(), key + ".name", "the tool function's name", "nothing");
    if (!reward::names_a_module(t.path) && !std::filesystem::is_regular_file(t.path))
      throw UserError("tools." + key + ".path: no such file: " + t.path);
    if (c.builtin_python && t.name == "python")
      throw UserError("tools." + key + ".name: python is the built-in tool's name (tools.builtin_python: true)");
    for (std::size_t j = 0; j < i; ++j)
      if (c.functions[j].name == t.name) throw UserError("tools." + key + ".name: a second tool named " + t.name);
  }
  const rollout::EnvironmentSpec& e = c.environment;
  if (e.path.empty()) {
    require_tools(e.name.empty(), "environment.path", "the environment's Python file or module (name is set)",
                  "nothing");
    return;
  }
  require_tools(!e.name.empty(), "environment.name", "the environment class (or factory function)", "nothing");
  if (!reward::names_a_module(e.path) && !std::filesystem::is_regular_file(e.path))
    throw UserError("tools.environment.path: no such file: " + e.path);
}

}  // namespace

void validate(const RunConfig& config) {
  RunConfig copy = config;  // bind() needs a mutable object; nothing is written
  require_finite(config::bind(copy), "");
  validate_run(config.run);
  validate_precision(config.precision);
  validate_optim(config.optim);
  validate_model(config.model);
  data::validate(config.data, "data");
  reward::validate(config.reward, "reward");
  validate_rollout(config.rollout);
  require(!(config.rollout.decode == rollout::DecodeMode::graphs && config.run.device == DeviceKind::cpu),
          "rollout.decode", "auto, dynamic or fixed with run.device: cpu (CUDA graphs need a GPU)", "graphs");
  validate_tools(config.tools);
  require(!config.tools.enabled() || (config.data.chat_template != "none" && !config.data.chat_template.empty()),
          "data.chat_template", "auto or a .jinja file with tools (the template renders them)",
          config.data.chat_template.empty() ? "nothing" : config.data.chat_template);
  validate_sft(config.sft);
  validate_grpo(config.grpo);
  const config::GrpoConfig& g = config.grpo;
  // Dynamic sampling renders a kept group's prompt again from its record, without the observation
  // its environment's reset() appended.
  require(config.tools.environment.path.empty() || g.filter_groups == algo::GroupFilter::none, "grpo.filter_groups",
          "none with tools.environment (dynamic sampling does not carry the rows' reset() observations yet)",
          config::enum_name(g.filter_groups));
  if (g.overlong == algo::Overlong::soft_penalty)
    require(g.overlong_buffer >= 1 && g.overlong_buffer <= config.rollout.max_new_tokens, "grpo.overlong_buffer",
            "in [1, rollout.max_new_tokens = " + std::to_string(config.rollout.max_new_tokens) +
                "] with grpo.overlong: soft_penalty",
            std::to_string(g.overlong_buffer));
  else
    require(g.overlong_buffer == 0, "grpo.overlong_buffer", "0 unless grpo.overlong is soft_penalty",
            std::to_string(g.overlong_buffer));
  require(!g.round_base_to_fp8 || config.precision.analog_mantissa_bits == 0, "grpo.round_base_to_fp8",
          "false with precision.analog_mantissa_bits (one grid for the base)", "true");
  validate_lora(config.lora, config);
  validate_offload(config);
  validate_dist(config.dist);
}

}  // namespace unstuck
