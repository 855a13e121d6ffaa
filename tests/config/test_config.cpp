// Run config loading: defaults < file < overrides, the exact error a user gets for each kind of
// mistake (unknown key, wrong type, bad enum, malformed YAML, missing file, out-of-range value),
// resolved-YAML round trips and the run directory's config.yaml.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/config/run_config.h"

namespace unstuck {
namespace {

namespace fs = std::filesystem;
using precision::PrecisionMode;

const fs::path kDefaultConfig = fs::path(UNSTUCK_SOURCE_DIR) / "configs/precision/default.yaml";

// The message of the UserError that `fn` throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("unstuck_test_config_" + std::string(info->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `text` to <temp dir>/x.yaml and returns its path.
  fs::path write_yaml(const std::string& text) {
    const fs::path path = dir_ / "x.yaml";
    std::ofstream(path) << text;
    return path;
  }
  std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
    const fs::path path = write_yaml(text);
    return error_of([&] { load_run_config(path, overrides); });
  }
  std::string at(int line) const { return (dir_ / "x.yaml").string() + ":" + std::to_string(line) + ": "; }

  fs::path dir_;
};

TEST_F(ConfigTest, ExampleFileLoadsAsTheDefaults) {
  const RunConfig config = load_run_config(kDefaultConfig);
  EXPECT_EQ(config.run.name, "precision-default");
  EXPECT_EQ(config.precision.mode, PrecisionMode::bf16_sr);
  EXPECT_EQ(config.precision.compute, precision::ComputeMode::native);
  EXPECT_EQ(config.precision.loss_scale.growth_interval, 1000);
  EXPECT_EQ(config.optim.lr, 1e-5);
  RunConfig defaults;
  defaults.run.name = "precision-default";
  EXPECT_EQ(resolved_yaml(config), resolved_yaml(defaults));
}

TEST_F(ConfigTest, NoFileGivesTheDefaults) {
  EXPECT_EQ(resolved_yaml(load_run_config("")), resolved_yaml(RunConfig{}));
  EXPECT_EQ(resolved_yaml(load_run_config(write_yaml(""))), resolved_yaml(RunConfig{}));
}

TEST_F(ConfigTest, OverridesApplyAfterTheFileInOrder) {
  const fs::path path = write_yaml("precision:\n  mode: fp16\noptim:\n  lr: 2e-5\n  beta1: 0.8\n");
  const RunConfig config =
      load_run_config(path, {"optim.lr=3e-5", "precision.threads=4", "precision.threads=6", "run.seed=7"});
  EXPECT_EQ(config.precision.mode, PrecisionMode::fp16);  // file
  EXPECT_EQ(config.optim.lr, 3e-5);                       // override beats file
  EXPECT_EQ(config.optim.beta1, 0.8);                     // file
  EXPECT_EQ(config.optim.beta2, 0.999);                   // default
  EXPECT_EQ(config.precision.threads, 6);                 // the later override wins
  EXPECT_EQ(config.run.seed, 7u);
}

TEST_F(ConfigTest, OverrideCanSetASectionWithAFlowMapping) {
  const RunConfig config = load_run_config("", {"precision.loss_scale={hysteresis: 3, min_scale: 2}", "run.name=a=b"});
  EXPECT_EQ(config.precision.loss_scale.hysteresis, 3);
  EXPECT_EQ(config.precision.loss_scale.min_scale, 2.0);
  EXPECT_EQ(config.precision.loss_scale.growth_interval, 1000);
  EXPECT_EQ(config.run.name, "a=b");
}

TEST_F(ConfigTest, UnknownKeySuggestsTheClosestSibling) {
  EXPECT_EQ(load_error("run:\n  name: x\nprecision:\n  mdoe: fp16\n"),
            at(4) + "unknown key 'precision.mdoe' (did you mean 'precision.mode'?)");
}

TEST_F(ConfigTest, UnknownKeySuggestsTheSameKeyInAnotherSection) {
  EXPECT_EQ(load_error("lr: 1e-6\n"), at(1) + "unknown key 'lr' (did you mean 'optim.lr'?)");
}

TEST_F(ConfigTest, UnknownKeyWithoutCloseMatchListsTheValidKeys) {
  EXPECT_EQ(load_error("optim:\n  zzzzzzzz: 1\n"),
            at(2) +
                "unknown key 'optim.zzzzzzzz' (valid keys in 'optim': lr, beta1, beta2, eps, "
                "weight_decay, grad_clip)");
}

TEST_F(ConfigTest, WrongTypeNamesFileLineAndDottedKey) {
  EXPECT_EQ(load_error("run:\n  seed: 3\n\nprecision:\n  mode: bf16\n\n  threads: abc\n"),
            at(7) + "precision.threads: expected an integer, got 'abc'");
  EXPECT_EQ(load_error("optim:\n  lr: [1, 2]\n"), at(2) + "optim.lr: expected a number, got a list");
  EXPECT_EQ(load_error("precision: 3\n"),
            at(1) +
                "precision: expected a mapping with keys mode, compute, threads, loss_scale, "
                "analog_mantissa_bits, offload, got '3'");
  EXPECT_EQ(load_error("- 1\n- 2\n"), at(1) +
                                          "top level: expected a mapping with keys run, precision, optim, model, lora, "
                                          "tokenizer, data, reward, rollout, tools, sft, grpo, dist, got a list");
}

TEST_F(ConfigTest, QuotedNumbersAndOutOfRangeIntegersAreRejected) {
  EXPECT_EQ(load_error("optim:\n  lr: \"1e-5\"\n"),
            at(2) + "optim.lr: expected a number, got '1e-5', a quoted string (remove the quotes)");
  EXPECT_EQ(load_error("precision:\n  threads: 99999999999\n"),
            at(2) +
                "precision.threads: expected an integer in [-2147483648, 2147483647], got "
                "'99999999999'");
  EXPECT_EQ(load_error("run:\n  seed: -1\n"),
            at(2) + "run.seed: expected an integer in [0, 9223372036854775807], got '-1'");
}

TEST_F(ConfigTest, BadEnumListsTheAllowedValues) {
  EXPECT_EQ(load_error("precision:\n  mode: bf17\n"),
            at(2) +
                "precision.mode: expected one of fp32 | fp16 | bf16 | bf16_sr | fp16_sr | fp8_rn | fp8_sr, got "
                "'bf17' (did you mean 'bf16'?)");
  EXPECT_EQ(load_error("precision:\n  compute: fastest\n"),
            at(2) + "precision.compute: expected one of native | fp32 | auto, got 'fastest'");
  EXPECT_EQ(load_error("precision:\n  compute: auto\n"), "");
  EXPECT_EQ(load_error("run:\n  log_level: loud\n"),
            at(2) + "run.log_level: expected one of trace | debug | info | warn | error, got 'loud'");
}

TEST_F(ConfigTest, DuplicateKeyIsAnError) {
  EXPECT_EQ(load_error("optim:\n  lr: 1\n  lr: 2\n"), at(3) + "duplicate key 'optim.lr'");
}

TEST_F(ConfigTest, OverrideErrorsNameTheOverride) {
  const auto error = [](const std::string& text) { return error_of([&] { load_run_config("", {text}); }); };
  EXPECT_EQ(error("precision.mdoe=fp16"),
            "override 'precision.mdoe=fp16': unknown key 'precision.mdoe' (did you mean "
            "'precision.mode'?)");
  EXPECT_EQ(error("precision.threads=abc"),
            "override 'precision.threads=abc': precision.threads: expected an integer, got 'abc'");
  EXPECT_EQ(error("precision.mode=bf17"),
            "override 'precision.mode=bf17': precision.mode: expected one of fp32 | fp16 | bf16 | "
            "bf16_sr | fp16_sr | fp8_rn | fp8_sr, got 'bf17' (did you mean 'bf16'?)");
  EXPECT_EQ(error("optim.lr"), "override 'optim.lr': expected key=value, e.g. optim.lr=3e-6");
  EXPECT_EQ(error("optim.lr.x=1"),
            "override 'optim.lr.x=1': unknown key 'optim.lr.x' ('optim.lr' is a value, not a "
            "section)");
  EXPECT_EQ(error("optim.lr=[1,").rfind("override 'optim.lr=[1,': invalid YAML value: ", 0), 0u)
      << error("optim.lr=[1,");
}

TEST_F(ConfigTest, MalformedYamlNamesFileAndLine) {
  const std::string message = load_error("run:\n  name: x\n  seed: [1, 2\n");
  EXPECT_EQ(message.rfind((dir_ / "x.yaml").string() + ":", 0), 0u) << message;
  EXPECT_NE(message.find(": invalid YAML: "), std::string::npos) << message;
  EXPECT_EQ(load_error("run:\n  name: x\n\tseed: 3\n").rfind(at(3) + "invalid YAML: ", 0), 0u)
      << load_error("run:\n  name: x\n\tseed: 3\n");
}

TEST_F(ConfigTest, MissingFileNamesThePath) {
  const fs::path path = dir_ / "nope.yaml";
  EXPECT_EQ(error_of([&] { load_run_config(path); }), "config file not found: " + path.string());
  EXPECT_EQ(error_of([&] { load_run_config(dir_); }),
            "config path " + dir_.string() + " is a folder; give a YAML file");
}

TEST_F(ConfigTest, ValidateNamesTheKeyTheRuleAndTheValue) {
  const auto error = [](const std::string& text) { return error_of([&] { load_run_config("", {text}); }); };
  EXPECT_EQ(error("optim.lr=-1"), "optim.lr must be > 0, got -1");
  EXPECT_EQ(error("optim.lr=.nan"), "optim.lr must be a finite number, got .nan");
  EXPECT_EQ(error("optim.beta2=1"), "optim.beta2 must be in [0, 1), got 1");
  EXPECT_EQ(error("grpo.clip_ratio_c=1"), "grpo.clip_ratio_c must be 0 (off) or in (1, 1000], got 1");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"grpo.advantage=mean_only", "grpo.scale_rewards=batch"});
            }),
            "grpo.scale_rewards must be auto or none with grpo.advantage: mean_only (which divides by nothing; for a "
            "scale use grpo.advantage: grpo), got 'batch'");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"grpo.overlong=soft_penalty", "rollout.max_new_tokens=16"});
            }),
            "grpo.overlong_buffer must be in [1, rollout.max_new_tokens = 16] with grpo.overlong: soft_penalty, got 0");
  EXPECT_EQ(error("grpo.overlong_buffer=4"),
            "grpo.overlong_buffer must be 0 unless grpo.overlong is soft_penalty, got 4");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"rollout.decode=graphs", "run.device=cpu"});
            }),
            "rollout.decode must be auto, dynamic or fixed with run.device: cpu (CUDA graphs need a GPU), got graphs");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"lora.rank=4", "lora.dropout=1"});
            }),
            "lora.dropout must be in [0, 1), got 1");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"lora.rank=4", "lora.init=pissa", "grpo.base_adapter=sft_adapter"});
            }),
            "lora.init must be kaiming or gaussian with grpo.base_adapter (the adapter is the start; PiSSA derives its "
            "own from the base), got pissa");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"lora.rank=4", "lora.pissa_niter=4"});
            }),
            "lora.pissa_niter must be 0 unless lora.init is pissa (it sets how PiSSA's SVD is computed), got 4");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"lora.rank=4", "lora.init=pissa", "lora.pissa_niter=-1"});
            }),
            "lora.pissa_niter must be in [0, 64] (0 = a full SVD), got -1");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"precision.offload=optimizer", "precision.mode=fp32"});
            }),
            "precision.mode must be fp16, bf16, bf16_sr or fp16_sr with precision.offload: optimizer (fp32 keeps one "
            "buffer for master and compute weights; FP8 channel scales are not offloaded), got fp32");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"precision.offload=optimizer", "lora.rank=8"});
            }),
            "lora.rank must be 0 with precision.offload: optimizer (the adapters' state is small), got 8");
  EXPECT_EQ(error("rollout.decode=graph"),
            "override 'rollout.decode=graph': rollout.decode: expected one of auto | dynamic | fixed | graphs, got "
            "'graph' (did you mean 'graphs'?)");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"reward.function.path=r.py", "reward.function.workers=0"});
            }),
            "reward.function.workers must be in [1, 64], got 0");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"reward.function.path=r.py", "reward.verifier=math"});
            }),
            "reward.verifier 'math' and reward.function.path both set: one of them scores (for several, use "
            "reward.terms)");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"reward.function.path=r.py", "reward.function.max_error_frac=2"});
            }),
            "reward.function.max_error_frac must be in [0, 1], got 2.0");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"reward.function.path=r.py", "reward.function.timeout_s=0"});
            }),
            "reward.function.timeout_s must be in (0, 86400] seconds, got 0.0");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"reward.function.path=r.py", "reward.command=[./judge]"});
            }),
            "reward.function.path and reward.command both set: one of them scores (for several, use reward.terms)");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"reward.command=[./judge]", "reward.verifier=code"});
            }),
            "reward.verifier 'code' and reward.command both set: one of them scores (for several, use reward.terms)");
  EXPECT_EQ(error("reward.command=['']"), "reward.command: the program (its first element) is empty");
  EXPECT_EQ(error("reward.code.cpu_s=0"), "reward.code.cpu_s must be in (0, 3600], got 0.0");
  EXPECT_EQ(error("reward.code.workers=0"), "reward.code.workers must be in [1, 256], got 0");
  EXPECT_EQ(error("reward.code.extract=middle"),
            "override 'reward.code.extract=middle': reward.code.extract: expected one of last_block | first_block | "
            "answer_tag | whole, got 'middle'");
  EXPECT_EQ(error("reward.function.style=openrlhf"),
            "override 'reward.function.style=openrlhf': reward.function.style: expected one of verl | trl, got "
            "'openrlhf'");
  EXPECT_EQ(error("grpo.oversample=2"),
            "grpo.oversample must be 0 unless grpo.filter_groups drops groups (nothing to refill), got 2");
  EXPECT_EQ(error_of([] {
              load_run_config("", {"grpo.filter_groups=zero_variance", "grpo.oversample=101"});
            }),
            "grpo.oversample must be in [0, 100], got 101");
  EXPECT_EQ(error("grpo.filter_groups=flat"),
            "override 'grpo.filter_groups=flat': grpo.filter_groups: expected one of none | zero_variance, got 'flat'");
  EXPECT_EQ(error("grpo.kl_in=reward"),
            "grpo.kl_in must be loss unless grpo.kl_coef > 0 (reward with kl_coef 0 subtracts nothing), got 'reward'");
  EXPECT_EQ(error("grpo.kl_in=advantage"),
            "override 'grpo.kl_in=advantage': grpo.kl_in: expected one of loss | reward, got 'advantage'");
  EXPECT_EQ(error("grpo.tis_cap=0.5"), "grpo.tis_cap must be 0 (off) or in [1, 1000], got 0.5");
  EXPECT_EQ(error("grpo.tis_cap=.inf"), "grpo.tis_cap must be a finite number, got .inf");
  EXPECT_EQ(error("grpo.advantage=passk"),
            "override 'grpo.advantage=passk': grpo.advantage: expected one of grpo | mean_only | rloo | reinforce_pp | "
            "grpo_passk, got 'passk'");
  for (const char* ok : {"grpo.advantage=grpo_passk", "grpo.tis_cap=2", "grpo.filter_groups=zero_variance"})
    EXPECT_NO_THROW(load_run_config("", {ok})) << ok;
  EXPECT_NO_THROW(load_run_config("", {"grpo.kl_in=reward", "grpo.kl_coef=0.01"}));
  EXPECT_NO_THROW(load_run_config("", {"grpo.filter_groups=zero_variance", "grpo.oversample=3"}));
  EXPECT_EQ(error("grpo.importance_ratio=seq"),
            "override 'grpo.importance_ratio=seq': grpo.importance_ratio: expected one of token | sequence, got 'seq'");
  EXPECT_EQ(error("optim.grad_clip=-0.5"), "optim.grad_clip must be >= 0 (0 = off), got -0.5");
  EXPECT_EQ(error("precision.threads=-2"), "precision.threads must be in [0, 4096] (0 = all cores), got -2");
  EXPECT_EQ(error("precision.analog_mantissa_bits=7"),
            "precision.analog_mantissa_bits must be in [0, 6] (0 = off; BF16 itself has 7), got 7");
  EXPECT_EQ(
      error_of([] {
        load_run_config("", {"precision.mode=fp8_rn", "precision.analog_mantissa_bits=4"});
      }),
      "precision.analog_mantissa_bits must be 0 with precision.mode fp8_rn (FP8 is a real format on its own grid), "
      "got 4");
  EXPECT_EQ(error("run.name=a/b"), "run.name must be a plain folder name (not empty, no '/'), got 'a/b'");
  EXPECT_EQ(error("precision.loss_scale.backoff_factor=1.5"),
            "precision.loss_scale.backoff_factor must be in (0, 1), got 1.5");
  EXPECT_EQ(error("precision.loss_scale.max_scale=0.5"),
            "precision.loss_scale.max_scale must be finite and >= precision.loss_scale.min_scale, "
            "got 0.5");
  EXPECT_EQ(error("tools.environment.name=Env"),
            "tools.environment.path must be the environment's Python file or module (name is set), got nothing");
  EXPECT_EQ(error("tools.environment.path=/no/such/env.py"),
            "tools.environment.name must be the environment class "
            "(or factory function), got nothing");
  EXPECT_EQ(error_of([] { load_run_config("", {"tools.environment={path: /no/such/env.py, name: Env}"}); }),
            "tools.environment.path: no such file: /no/such/env.py");
  const std::string env = std::string(UNSTUCK_SOURCE_DIR) + "/tests/train/tool_environment.py";
  EXPECT_EQ(error_of([&] {
              load_run_config("", {"tools.environment={path: " + env + ", name: MultiplyEnv}",
                                   "data.chat_template=auto", "grpo.filter_groups=zero_variance"});
            }),
            "grpo.filter_groups must be none with tools.environment (dynamic sampling does not carry the rows' reset() "
            "observations yet), got zero_variance");
  RunConfig config;
  config.optim.eps = 0;
  EXPECT_EQ(error_of([&] { validate(config); }), "optim.eps must be > 0, got 0");
  EXPECT_NO_THROW(validate(RunConfig{}));
}

TEST_F(ConfigTest, ResolvedYamlRoundTrips) {
  RunConfig config;
  config.run.name = "seed 3: \"quoted\" #1";
  config.run.output_dir = "true";
  config.run.seed = (uint64_t{1} << 62) + 5;
  config.run.log_level = LogLevel::debug;
  config.precision.mode = PrecisionMode::fp16_sr;
  config.precision.compute = precision::ComputeMode::fp32;
  config.optim.lr = 0.1 + 0.2;  // needs all 17 digits
  config.optim.weight_decay = 1e-300;
  for (const bool with_docs : {true, false}) {
    const std::string yaml = resolved_yaml(config, with_docs);
    RunConfig loaded;
    config::load_yaml_string(config::bind(loaded), yaml, "<resolved>");
    EXPECT_EQ(resolved_yaml(loaded, with_docs), yaml);
    EXPECT_EQ(loaded.run.name, config.run.name);
    EXPECT_EQ(loaded.run.output_dir, "true");
    EXPECT_EQ(loaded.optim.lr, 0.1 + 0.2);
  }
  EXPECT_NE(resolved_yaml(RunConfig{}).find("  mode: bf16_sr"), std::string::npos);
  EXPECT_NE(resolved_yaml(RunConfig{}).find("# loss scale of the first step"), std::string::npos);
}

TEST_F(ConfigTest, PrepareRunDirWritesTheResolvedConfig) {
  const RunConfig config =
      load_run_config(kDefaultConfig, {"run.output_dir=" + (dir_ / "runs").string(), "run.name=r1"});
  const fs::path run = prepare_run_dir(config);
  EXPECT_EQ(run, dir_ / "runs" / "r1");
  EXPECT_EQ(read_file(run / "config.yaml"), resolved_yaml(config));
  EXPECT_FALSE(fs::exists(run / "config.yaml.tmp"));
  EXPECT_EQ(resolved_yaml(load_run_config(run / "config.yaml")), resolved_yaml(config));
}

TEST_F(ConfigTest, DocsListEveryKeyWithDefaultAndDoc) {
  const std::string text = run_config_docs();
  EXPECT_NE(text.find("precision.loss_scale.growth_interval (integer, default: 1000)\n"
                      "    overflow-free steps before the scale grows\n"),
            std::string::npos);
  EXPECT_NE(text.find("precision.mode (fp32 | fp16 | bf16 | bf16_sr | fp16_sr | fp8_rn | fp8_sr, default: bf16_sr)"),
            std::string::npos);
  EXPECT_NE(text.find("optim.lr (number, default: 1e-05)"), std::string::npos);
  const std::string table = run_config_docs(true);
  EXPECT_NE(table.find("| `optim.grad_clip` | number | `1.0` |"), std::string::npos);
  // Every row has the table's four cells: a '|' inside a doc is escaped.
  EXPECT_NE(table.find("| `grpo.lr_schedule` | `constant`, `warmup`, `cosine` | `constant` | constant \\| warmup"),
            std::string::npos);
  std::istringstream rows(table);
  for (std::string row; std::getline(rows, row);) {
    int cells = -1;
    for (std::size_t i = 0; i < row.size(); ++i) cells += row[i] == '|' && (i == 0 || row[i - 1] != '\\');
    EXPECT_EQ(cells, 4) << row;
  }
}

TEST(PrecisionConfig, RoundModeAndLossScalingPerMode) {
  using precision::RoundMode;
  EXPECT_EQ(precision::round_mode_for(PrecisionMode::fp32), RoundMode::fp32);
  EXPECT_EQ(precision::round_mode_for(PrecisionMode::fp16), RoundMode::fp16_rn);
  EXPECT_EQ(precision::round_mode_for(PrecisionMode::bf16), RoundMode::bf16_rn);
  EXPECT_EQ(precision::round_mode_for(PrecisionMode::bf16_sr), RoundMode::bf16_sr);
  EXPECT_EQ(precision::round_mode_for(PrecisionMode::fp16_sr), RoundMode::fp16_sr);
  EXPECT_TRUE(precision::uses_loss_scaling(PrecisionMode::fp16));
  EXPECT_TRUE(precision::uses_loss_scaling(PrecisionMode::fp16_sr));
  EXPECT_FALSE(precision::uses_loss_scaling(PrecisionMode::bf16_sr));
  EXPECT_FALSE(precision::uses_loss_scaling(PrecisionMode::fp32));
  EXPECT_STREQ(config::enum_name(PrecisionMode::bf16_sr), "bf16_sr");
}

// ---- the generic mechanism on a struct with every supported field type --------------------------

enum class Color { red, dark_blue };
inline constexpr std::array<std::pair<Color, const char*>, 2> kColorNames{{
    {Color::red, "red"},
    {Color::dark_blue, "dark_blue"},
}};
constexpr const auto& enum_names(Color) { return kColorNames; }

struct Everything {
  bool flag = false;
  int16_t small = 1;
  double real = 0.5;
  float single = 0.25f;
  std::string text = "hi";
  Color color = Color::red;
  std::vector<int> ints{1, 2};
  std::vector<double> reals;
  std::vector<std::string> words{"a b", "c"};

  template <class V>
  void visit(V& v) {
    v("flag", flag, "a bool");
    v("small", small, "an int16");
    v("real", real, "a double");
    v("single", single, "a float");
    v("text", text, "a string");
    v("color", color, "an enum");
    v("ints", ints, "integers");
    v("reals", reals, "numbers");
    v("words", words, "strings");
  }
};

TEST(ConfigFields, EveryFieldTypeLoadsChecksAndRoundTrips) {
  Everything e;
  const config::Field root = config::bind(e);
  config::load_yaml_string(root,
                           "flag: true\nsmall: -7\nreal: .inf\nsingle: 2\ntext: 12\ncolor: dark_blue\n"
                           "ints: [3, 4, 5]\nreals: [1e-3, -2]\nwords: []\n",
                           "t.yaml");
  EXPECT_TRUE(e.flag);
  EXPECT_EQ(e.small, -7);
  EXPECT_TRUE(std::isinf(e.real));
  EXPECT_EQ(e.single, 2.0f);
  EXPECT_EQ(e.text, "12");
  EXPECT_EQ(e.color, Color::dark_blue);
  EXPECT_EQ(e.ints, (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(e.reals, (std::vector<double>{1e-3, -2}));
  EXPECT_TRUE(e.words.empty());
  config::apply_override(root, "words=[x, \"y: z\"]");
  EXPECT_EQ(e.words, (std::vector<std::string>{"x", "y: z"}));
  EXPECT_EQ(config::to_yaml(root, false),
            "flag: true\nsmall: -7\nreal: .inf\nsingle: 2.0\ntext: \"12\"\ncolor: dark_blue\n"
            "ints: [3, 4, 5]\nreals: [0.001, -2.0]\nwords: [x, \"y: z\"]\n");

  const auto error = [&](const std::string& yaml) {
    return error_of([&] { config::load_yaml_string(root, yaml, "t.yaml"); });
  };
  EXPECT_EQ(error("ints: [1, a]\n"), "t.yaml:1: ints[1]: expected an integer, got 'a'");
  EXPECT_EQ(error("ints: [1, 9999999999]\n"),
            "t.yaml:1: ints[1]: expected an integer in [-2147483648, 2147483647], got '9999999999'");
  EXPECT_EQ(error("small: 40000\n"), "t.yaml:1: small: expected an integer in [-32768, 32767], got '40000'");
  EXPECT_EQ(error("ints: 3\n"), "t.yaml:1: ints: expected a list of integers, got '3'");
  EXPECT_EQ(error("flag: maybe\n"), "t.yaml:1: flag: expected true or false, got 'maybe'");
  EXPECT_EQ(error("flag:\n"), "t.yaml:1: flag: expected true or false, got an empty value");
  EXPECT_EQ(error("text: [a]\n"), "t.yaml:1: text: expected a string, got a list");
  EXPECT_EQ(error("reals: [1, {a: 1}]\n"), "t.yaml:1: reals[1]: expected a number, got a mapping");
}

// A free mapping (reward.function.kwargs' kind): any YAML mapping, kept as JSON with YAML 1.2's core
// types; overrides replace it; the dump reads back; a non-mapping, a non-finite number or a duplicate
// key is refused by name.
struct WithMapping {
  config::Mapping kwargs;
  template <class V>
  void visit(V& v) {
    v("kwargs", kwargs, "keywords");
  }
};

TEST(ConfigFields, AFreeMappingIsHandedOnAsJson) {
  WithMapping w;
  const config::Field root = config::bind(w);
  EXPECT_TRUE(w.kwargs.empty());
  config::load_yaml_string(root,
                           "kwargs:\n  method: flexible\n  format_score: 0.0\n  n: 3\n  on: true\n  none: ~\n"
                           "  quoted: \"12\"\n  cfg: {max_len: 40, tags: [a, 1]}\n",
                           "t.yaml");
  EXPECT_EQ(
      w.kwargs.json,
      R"({"cfg":{"max_len":40,"tags":["a",1]},"format_score":0.0,"method":"flexible","n":3,"none":null,"on":true,"quoted":"12"})");
  const std::string dumped = config::to_yaml(root, false);
  WithMapping again;
  const config::Field root2 = config::bind(again);
  config::load_yaml_string(root2, dumped, "dump.yaml");
  EXPECT_EQ(again.kwargs.json, w.kwargs.json) << dumped;
  config::apply_override(root, "kwargs={ngram_size: 2, max_penalty: -1.0}");
  EXPECT_EQ(w.kwargs.json, R"({"max_penalty":-1.0,"ngram_size":2})");
  config::load_yaml_string(root, "kwargs:\n", "t.yaml");
  EXPECT_TRUE(w.kwargs.empty());
  const auto error = [&](const std::string& yaml) {
    return error_of([&] { config::load_yaml_string(root, yaml, "t.yaml"); });
  };
  EXPECT_EQ(error("kwargs: 3\n"), "t.yaml:1: kwargs: expected a mapping (name: value, ...), got '3'");
  EXPECT_EQ(error("kwargs: {x: .inf}\n"),
            "t.yaml:1: kwargs.x: .inf is not a finite number (JSON, and so the value handed on, has none)");
  EXPECT_EQ(error("kwargs: {x: 1, x: 2}\n").find("duplicate key 'kwargs.x'") != std::string::npos, true)
      << error("kwargs: {x: 1, x: 2}\n");
}

// A list of sections (reward.terms' kind): items start from their defaults, the list is replaced as
// a whole, `list[i].key=value` sets one item's key, the dump reads back, and every mistake names the
// item (`pieces[1].size`).
struct Piece {
  std::string label;
  int size = 3;
  std::vector<int> marks;
  template <class V>
  void visit(V& v) {
    v("label", label, "its name");
    v("size", size, "its size");
    v("marks", marks, "its marks");
  }
};
struct Box {
  int lid = 1;
  std::vector<Piece> pieces;
  template <class V>
  void visit(V& v) {
    v("lid", lid, "the lid");
    v("pieces", pieces, "the pieces");
  }
};

TEST(ConfigFields, AListOfSectionsLoadsOverridesAndRoundTrips) {
  Box b;
  const config::Field root = config::bind(b);
  EXPECT_EQ(config::to_yaml(root, false), "lid: 1\npieces: []\n");
  config::load_yaml_string(root, "pieces:\n  - label: a\n    marks: [1, 2]\n  - size: 9\n  -\n", "t.yaml");
  ASSERT_EQ(b.pieces.size(), 3u);
  EXPECT_EQ(b.pieces[0].label, "a");
  EXPECT_EQ(b.pieces[0].size, 3);  // an item's keys left out keep their defaults
  EXPECT_EQ(b.pieces[1].size, 9);
  EXPECT_EQ(b.pieces[2].label, "");
  config::apply_override(root, "pieces[1].size=4");
  EXPECT_EQ(b.pieces[1].size, 4);
  const std::string yaml = config::to_yaml(root, false);
  EXPECT_EQ(yaml,
            "lid: 1\npieces:\n  - label: a\n    size: 3\n    marks: [1, 2]\n  - label: \"\"\n    size: 4\n"
            "    marks: []\n  - label: \"\"\n    size: 3\n    marks: []\n");
  for (const bool with_docs : {true, false}) {
    Box again;
    config::load_yaml_string(config::bind(again), config::to_yaml(root, with_docs), "<dump>");
    EXPECT_EQ(config::to_yaml(config::bind(again), false), yaml);
  }
  config::apply_override(root, "pieces=[{label: only}]");  // the whole list, replaced
  ASSERT_EQ(b.pieces.size(), 1u);
  EXPECT_EQ(b.pieces[0].label, "only");
  EXPECT_EQ(b.pieces[0].size, 3);

  const auto error = [&](const std::string& yaml_text) {
    return error_of([&] { config::load_yaml_string(root, yaml_text, "t.yaml"); });
  };
  EXPECT_EQ(error("pieces:\n  - label: a\n  - sise: 2\n"),
            "t.yaml:3: unknown key 'pieces[1].sise' (did you mean 'pieces[1].size'?)");
  EXPECT_EQ(error("pieces:\n  - size: big\n"), "t.yaml:2: pieces[0].size: expected an integer, got 'big'");
  EXPECT_EQ(error("pieces: 3\n"),
            "t.yaml:1: pieces: expected a list of mappings, each with keys label, size, marks, got '3'");
  EXPECT_EQ(error("pieces: [1]\n"),
            "t.yaml:1: pieces[0]: expected a list of mappings, each with keys label, size, marks, got '1'");
  EXPECT_EQ(error_of([&] { config::apply_override(root, "pieces[3].size=1"); }),
            "override 'pieces[3].size=1': pieces has 1 item(s), so [3] is not one (set the whole list: "
            "pieces=[{...}, ...])");
  EXPECT_EQ(error_of([&] { config::apply_override(root, "lid[0]=1"); }),
            "override 'lid[0]=1': 'lid' is not a list of sections; it takes no [index]");
  EXPECT_EQ(config::docs_text(root),
            "lid (integer, default: 1)\n    the lid\npieces (list of sections, default: [1 item(s)])\n    the pieces\n"
            "pieces[].label (string, default: \"\")\n    its name\npieces[].size (integer, default: 3)\n    its size\n"
            "pieces[].marks (list of integers, default: [])\n    its marks\n");
}

TEST(ConfigFields, FormatDoubleIsShortestAndExact) {
  EXPECT_EQ(config::format_double(1e-5), "1e-05");
  EXPECT_EQ(config::format_double(2.0), "2.0");
  EXPECT_EQ(config::format_double(0.999), "0.999");
  EXPECT_EQ(config::format_double(-INFINITY), "-.inf");
  EXPECT_EQ(config::format_double(0.1 + 0.2), "0.30000000000000004");
}

}  // namespace
}  // namespace unstuck
