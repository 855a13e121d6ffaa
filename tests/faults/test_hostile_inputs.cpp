// Hostile inputs to the libtorch-free readers (issue 14): deeply nested and endless JSON lines,
// numbers out of range, a config path that never ends, NUL in names, absurd sizes. Each must give a
// UserError naming the file/line or the key, never a signal, bad_alloc or a silent default.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>

#include "faults/fault_util.h"
#include "unstuck/config/config.h"
#include "unstuck/train/memory_plan.h"
#include "unstuck/config/run_config.h"
#include "unstuck/data/record.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors.h"

namespace unstuck::faults {
namespace {

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HostileJson, DeepNestingIsRefusedWithFileAndLine) {
  ScratchDir dir;
  const fs::path file = dir.path / "deep.jsonl";
  write_file(file, "{\"task\": \"arithmetic\", \"prompt\": \"1+1=\", \"answer\": \"2\"}\n" + nested(100000) + "\n");
  const std::string e = user_error([&] { data::read_jsonl(file); });
  EXPECT_TRUE(has(e, file.string() + ":2: JSON nested deeper than 512 levels")) << e;
  // Inside a record's extra field too, and in an object rather than an array.
  const std::string deep_field =
      "{\"task\": \"math\", \"prompt\": \"p\", \"answer\": \"1\", \"x\": " + std::string(600, '[') +
      std::string(600, ']') + "}";
  EXPECT_TRUE(has(user_error([&] { data::parse_record_line(deep_field, "f:7"); }), "f:7: JSON nested deeper"));
  // Brackets inside strings do not count; 512 levels are fine.
  const std::string in_string =
      "{\"task\": \"math\", \"prompt\": \"" + std::string(5000, '[') + "\", \"answer\": \"1\"}";
  EXPECT_EQ(data::parse_record_line(in_string, "f:1").prompt.size(), 5000u);
  EXPECT_NO_THROW(io::parse_json(nested(512), "f:1"));
  EXPECT_TRUE(has(user_error([&] { io::parse_json(nested(513), "f:1"); }), "nested deeper"));
}

TEST(HostileJson, EveryJsonReaderHasTheCap) {
  ScratchDir dir;
  write_file(dir.path / "config.json", "{\"a\": " + nested(100000) + "}");
  EXPECT_TRUE(
      has(user_error([&] { io::read_json_file(dir.path / "config.json"); }), (dir.path / "config.json").string()));
  // A safetensors header nested 100,000 deep.
  const std::string header = "{\"a\": " + nested(100000) + "}";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[std::size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  write_file(dir.path / "m.safetensors", bytes + header);
  const std::string e = user_error([&] { io::read_safetensors(dir.path / "m.safetensors"); });
  EXPECT_TRUE(has(e, "m.safetensors") && has(e, "nested deeper")) << e;
}

TEST(HostileJson, NumberOverflowNamesTheLine) {
  ScratchDir dir;
  const fs::path file = dir.path / "big.jsonl";
  write_file(file,
             "{\"task\": \"math\", \"prompt\": \"p\", \"answer\": 1}\n{\"task\": \"math\", \"prompt\": \"p\", "
             "\"answer\": 1e400}\n");
  const std::string e = user_error([&] { data::read_jsonl(file); });
  EXPECT_TRUE(has(e, file.string() + ":2: invalid JSON") && has(e, "1e400")) << e;
}

TEST(HostileJson, EndlessLineIsCapped) {
  std::istringstream in("short\n" + std::string(5000, 'x') + "\n");
  std::string line;
  long long number = 0;
  ASSERT_TRUE(io::read_capped_line(in, line, 1000, "f.jsonl", number));
  EXPECT_EQ(line, "short");
  EXPECT_EQ(user_error([&] { io::read_capped_line(in, line, 1000, "f.jsonl", number); }),
            "f.jsonl:2: line longer than 1000 bytes (is this a JSONL file?)");
  // /dev/zero as a JSONL file: one endless line, refused at the 64 MiB cap instead of eating memory.
  EXPECT_TRUE(has(user_error([&] { data::read_jsonl("/dev/zero"); }), "/dev/zero:1: line longer than"));
  // A last line without a newline is still a line; a blank input has none.
  std::istringstream tail("a\nb");
  number = 0;
  ASSERT_TRUE(io::read_capped_line(tail, line, 10, "t", number));
  ASSERT_TRUE(io::read_capped_line(tail, line, 10, "t", number));
  EXPECT_EQ(line, "b");
  EXPECT_EQ(number, 2);
  EXPECT_FALSE(io::read_capped_line(tail, line, 10, "t", number));
}

TEST(HostileConfig, DevZeroAndNulAndEmptyKeysAreNamed) {
  EXPECT_TRUE(has(user_error([] { load_run_config("/dev/zero"); }), "config file /dev/zero is larger than 16 MiB"));
  ScratchDir dir;
  write_file(dir.path / "nul.yaml", "run:\n  name: \"ab\\0cd\"\n");
  const std::string e = user_error([&] { load_run_config(dir.path / "nul.yaml"); });
  EXPECT_TRUE(has(e, "run.name must be a folder name without control characters") && has(e, "ab\\x00cd")) << e;
  EXPECT_TRUE(has(user_error([] { load_run_config("", {"run.name=a\tb"}); }), "run.name"));
  // YAML nested 100,000 deep: yaml-cpp's depth guard, worded as such.
  write_file(dir.path / "deep.yaml", "a: " + nested(100000) + "\n");
  const std::string deep = user_error([&] { load_run_config(dir.path / "deep.yaml"); });
  EXPECT_TRUE(has(deep, "deep.yaml:1: invalid YAML: nested deeper than")) << deep;
}

// A NUL byte written into the file (not the YAML escape) is named at its line and column; yaml-cpp
// used to show "a\0b" as 'a\x08 ' (issue 31).
TEST(HostileConfig, RawControlBytesAreNamedWhereTheyAre) {
  ScratchDir dir;
  write_file(dir.path / "nul.yaml", std::string("run:\n  name: a\0b\n", 18));
  EXPECT_EQ(user_error([&] { load_run_config(dir.path / "nul.yaml"); }),
            (dir.path / "nul.yaml").string() +
                ":2:10: control byte 0x00 (NUL) in the config; a YAML config is printable text");
  write_file(dir.path / "bell.yaml", "optim:\n  lr: 1e-5\x07\n");
  EXPECT_TRUE(has(user_error([&] { load_run_config(dir.path / "bell.yaml"); }), "bell.yaml:2:11: control byte 0x07"));
}

// Every number key of the config refuses .inf, -.inf and .nan by its name, before its own range
// (`init_std=.inf` used to say "must be > 0"); loss weights have a stated range, so 1e300 is
// refused as such instead of surfacing as a non-finite gradient blamed on optim.lr (issue 31).
TEST(HostileConfig, EveryNumberIsFiniteAndCoefficientsInRange) {
  RunConfig defaults;
  std::vector<std::string> keys;
  const std::function<void(const config::Field&, const std::string&)> walk = [&](const config::Field& f,
                                                                                 const std::string& prefix) {
    for (const config::Field& c : f.children) {
      const std::string key = prefix.empty() ? c.name : prefix + "." + c.name;
      if (c.kind == config::Kind::section) walk(c, key);
      if (c.kind == config::Kind::real) keys.push_back(key);
    }
  };
  walk(config::bind(defaults), "");
  ASSERT_GE(keys.size(), 30u);  // every number key of the tree (32 when this was written)
  for (const std::string& key : keys)
    for (const std::string value : {".inf", "-.inf", ".nan"})
      EXPECT_EQ(user_error([&] { load_run_config("", {key + "=" + value}); }),
                key + " must be a finite number, got " + value);
  EXPECT_EQ(user_error([] { load_run_config("", {"grpo.kl_coef=1e300"}); }),
            "grpo.kl_coef must be in [0, 1000] (0 = off), got 1e+300");
  EXPECT_EQ(user_error([] { load_run_config("", {"grpo.entropy_coef=5000"}); }),
            "grpo.entropy_coef must be in [0, 1000] (0 = off), got 5000");
  EXPECT_EQ(user_error([] { load_run_config("", {"grpo.clip_high=1e9"}); }),
            "grpo.clip_high must be in (0, 1000], got 1e+09");
  EXPECT_NO_THROW(load_run_config("", {"grpo.kl_coef=1000", "grpo.entropy_coef=0.01"}));
}

// Every size from the issue gets a bound or a memory estimate that names the key (and the bytes).
TEST(HostileConfig, AbsurdSizesNameTheKey) {
  EXPECT_TRUE(has(user_error([] { load_run_config("", {"precision.threads=100000000"}); }),
                  "precision.threads must be in [0, 4096]"));
  EXPECT_TRUE(has(user_error([] { load_run_config("", {"rollout.max_new_tokens=1000000000"}); }),
                  "rollout.max_new_tokens must be in [1, 16777216]"));
  EXPECT_TRUE(has(user_error([] { load_run_config("", {"model.max_seq_len=1000000000000"}); }), "model.max_seq_len"));
  const double kMachine = 24.0 * (1 << 30);
  const auto preflight_error = [&](const std::vector<std::string>& overrides, const char* command) {
    return user_error([&] {
      RunConfig c = load_run_config("", overrides);
      if (c.model.vocab_size == 0) c.model.vocab_size = 1000;
      train::check_limits(c);  // what a run's plan checks before step 1 (train/run_plan.cpp)
      train::check_memory(train::plan_memory(c, command), train::host_memory_limit(kMachine));
    });
  };
  // Sizes past any real model (2^38 parameters) are refused when the config loads.
  EXPECT_TRUE(has(preflight_error({"model.n_layers=1000000000000"}, "sft"), "model.n_layers must be in [1, 2^38]"));
  EXPECT_TRUE(has(preflight_error({"model.vocab_size=1000000000000"}, "eval"), "model.vocab_size"));
  // Within limits: the defaults fit in 24 GiB for every command.
  for (const char* command : {"sft", "train", "eval"}) EXPECT_EQ(preflight_error({}, command), "<no UserError>");
  // Sizes that load but cannot fit: the pre-flight memory estimate names the key.
  const std::string layers = preflight_error({"model.n_layers=100000"}, "sft");
  EXPECT_TRUE(has(layers, "sft: planned peak memory") && has(layers, "exceeds this machine's 24.0 GiB") &&
              has(layers, "model.n_layers (100000)"))
      << layers;
  const std::string prompts = preflight_error({"grpo.prompts_per_step=1000000000000"}, "train");
  EXPECT_TRUE(has(prompts, "grpo.prompts_per_step (1000000000000)")) << prompts;
  const std::string batch = preflight_error({"sft.batch_size=1000000000000"}, "sft");
  EXPECT_TRUE(has(batch, "sft.batch_size (1000000000000)")) << batch;
  const std::string vocab = preflight_error({"model.vocab_size=500000000"}, "eval");
  EXPECT_TRUE(has(vocab, "model.vocab_size (500000000)")) << vocab;
  // Completion longer than the context: named before any allocation.
  EXPECT_TRUE(has(preflight_error({"rollout.max_new_tokens=200", "model.max_seq_len=128"}, "train"),
                  "rollout.max_new_tokens (200) must be < model.max_seq_len (128)"));
}

TEST(HostileConfig, MaxConsecutiveSkipsIsValidated) {
  EXPECT_TRUE(has(user_error([] { load_run_config("", {"precision.loss_scale.max_consecutive_skips=-1"}); }),
                  "precision.loss_scale.max_consecutive_skips must be >= 0"));
  EXPECT_EQ(
      load_run_config("", {"precision.loss_scale.max_consecutive_skips=0"}).precision.loss_scale.max_consecutive_skips,
      0);
}

}  // namespace
}  // namespace unstuck::faults
