// Chat templates: string parity with transformers' apply_chat_template (its jinja2 environment) on
// every case of chat_template_cases.json, the refusal of constructs outside the subset (naming the
// construct and its position), the runaway limits, and how a model directory's template is found.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/tokenizer/chat_template.h"
#include "common/error_of.h"

namespace unstuck::tokenizer {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("unstuck_chat_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

using unstuck::testing::error_of;

std::string render(const std::string& source,
                   const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  return ChatTemplate::parse(source, "t").render(context);
}

TEST(ChatTemplate, EqualsTransformersOnEveryCase) {
  const fs::path cases_file = fs::path(UNSTUCK_SOURCE_DIR) / "tests/tokenizer/chat_template_cases.json";
  const fs::path ref_file = temp_dir("parity") / "reference.json";
  const std::string cmd = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR +
                          "/tests/tokenizer/chat_template_ref.py " + cases_file.string() + " " + ref_file.string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto cases = nlohmann::ordered_json::parse(std::ifstream(cases_file));
  const auto ref = nlohmann::ordered_json::parse(std::ifstream(ref_file));
  int equal = 0, total = 0, raised = 0;
  for (auto it = cases["templates"].begin(); it != cases["templates"].end(); ++it) {
    const ChatTemplate tpl = ChatTemplate::parse(it.value().get<std::string>(), it.key());
    for (size_t i = 0; i < cases["conversations"].size(); ++i) {
      for (int gen = 0; gen < 2; ++gen) {
        const std::string key = it.key() + "/" + std::to_string(i) + "/" + std::to_string(gen);
        nlohmann::ordered_json context = cases["special_tokens"];
        context["messages"] = cases["conversations"][i];
        context["add_generation_prompt"] = gen == 1;
        std::string got;
        bool threw = false;
        try {
          got = tpl.render(context);
        } catch (const UserError& e) {
          got = e.what();
          threw = true;
        }
        const auto& want = ref.at(key);
        const bool same = want.is_object() ? threw : (!threw && want.get<std::string>() == got);
        // Both raise on the same cases, and with the template's own message.
        if (want.is_object() && threw) {
          EXPECT_NE(got.find(want["error"].get<std::string>()), std::string::npos) << key << ": " << got;
        }
        EXPECT_TRUE(same) << key << "\n got:  " << nlohmann::json(got).dump() << "\n want: " << want.dump();
        equal += same;
        raised += threw;
        ++total;
      }
    }
  }
  std::printf("chat-template parity with transformers' jinja2: %d/%d strings equal (%d cases raise in both)\n", equal,
              total, raised);
  EXPECT_EQ(equal, total);
  EXPECT_GE(total, 190);
}

TEST(ChatTemplate, ApplyBuildsTheContextTransformersPasses) {
  const ChatTemplate tpl = ChatTemplate::parse(
      "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "chatml");
  EXPECT_EQ(tpl.apply({{"user", "2+2?"}}, true, "", "<|im_end|>"),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(tpl.apply({{"system", "Be brief."}, {"user", "hi"}}, false, "<s>", ""),
            "<s><|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
}

TEST(ChatTemplate, RefusesConstructsOutsideTheSubsetByNameAndPosition) {
  const auto refused = [](const std::string& source) {
    return error_of([&] { ChatTemplate::parse(source, "x.jinja"); });
  };
  EXPECT_EQ(refused("ab\n{{ m | wordwrap }}"),
            "chat template x.jinja: line 2, column 8: unsupported filter 'wordwrap' (supported: abs, capitalize, "
            "count, d, default, first, int, items, join, last, length, list, lower, reject, replace, reverse, "
            "select, string, tojson, trim, upper)");
  EXPECT_EQ(refused("{% macro f() %}{% endmacro %}"),
            "chat template x.jinja: line 1, column 4: unsupported statement 'macro'");
  EXPECT_EQ(refused("{% include 'a' %}"), "chat template x.jinja: line 1, column 4: unsupported statement 'include'");
  EXPECT_EQ(refused("{% raw %}x{% endraw %}"), "chat template x.jinja: line 1, column 1: unsupported statement 'raw'");
  EXPECT_NE(refused("{{ x is divisibleby 3 }}").find("line 1, column 9: unsupported test 'divisibleby'"),
            std::string::npos);
  EXPECT_NE(refused("{{ strftime_now('%d') }}").find("line 1, column 4: unsupported function 'strftime_now'"),
            std::string::npos);
  EXPECT_NE(refused("{{ s.format(1) }}").find("line 1, column 6: unsupported method 'format'"), std::string::npos);
  EXPECT_NE(refused("{% for m in ms if m %}{% endfor %}").find("unsupported construct 'for ... if'"),
            std::string::npos);
  EXPECT_NE(refused("{% set x %}a{% endset %}").find("unsupported construct 'set' block"), std::string::npos);
  EXPECT_NE(refused("{% generation %}a{% endgeneration %}").find("unsupported statement 'generation'"),
            std::string::npos);
  EXPECT_NE(refused("{% if x %}a").find("missing {% endif %}"), std::string::npos);
  EXPECT_NE(refused("{{ x ").find("tag is never closed with '}}'"), std::string::npos);
  EXPECT_NE(refused("{# note").find("comment '{#' is never closed"), std::string::npos);
}

TEST(ChatTemplate, RuntimeErrorsNameTheCause) {
  EXPECT_EQ(error_of([] { render("{{ raise_exception('roles must alternate') }}"); }),
            "chat template t raised: roles must alternate");
  EXPECT_EQ(error_of([] { render("\n  {{ nothing.content }}"); }),
            "chat template t: line 2, column 14: 'nothing' is undefined");
  EXPECT_NE(error_of([] { render("{% set x = 1 %}{% set x.a = 2 %}"); }).find("not a namespace"), std::string::npos);
  EXPECT_NE(error_of([] { render("{{ 1 // 0 }}"); }).find("integer division or modulo by zero"), std::string::npos);
  EXPECT_NE(error_of([] { ChatTemplate::parse("x", "t").render(nlohmann::ordered_json::array()); }).find("JSON object"),
            std::string::npos);
}

TEST(ChatTemplate, LimitsBoundRunawayTemplates) {
  ChatTemplateLimits limits;
  limits.max_loop_iterations = 1000;
  limits.max_output_bytes = 100;
  limits.max_nesting = 20;
  const auto with_limits = [&](const std::string& src) {
    return error_of([&] { ChatTemplate::parse(src, "t", limits).render(nlohmann::ordered_json::object()); });
  };
  EXPECT_NE(with_limits("{% for i in range(10) %}{% for j in range(200) %}{% endfor %}{% endfor %}")
                .find("more than 1000 loop iterations"),
            std::string::npos);
  EXPECT_NE(with_limits("{% for i in range(50) %}abc{% endfor %}").find("output exceeds 100 bytes"), std::string::npos);
  EXPECT_NE(
      with_limits("{{ " + std::string(40, '(') + "1" + std::string(40, ')') + " }}").find("nesting deeper than 20"),
      std::string::npos);
  std::string ifs;
  for (int k = 0; k < 30; ++k) ifs += "{% if true %}";
  EXPECT_NE(with_limits(ifs).find("nesting deeper than 20"), std::string::npos);
}

TEST(ChatTemplate, FindsTheModelDirectoryTemplate) {
  const fs::path dir = temp_dir("find");
  EXPECT_FALSE(find_chat_template(dir).has_value());  // no files at all
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": {"content": "<|begin_of_text|>", "lstrip": false}, "eos_token": "<|eot_id|>",
            "chat_template": "{{ bos_token }}x"})";
  auto found = find_chat_template(dir);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->source, "{{ bos_token }}x");
  EXPECT_EQ(found->origin, (dir / "tokenizer_config.json").string() + ":chat_template");
  EXPECT_EQ(found->bos_token, "<|begin_of_text|>");
  EXPECT_EQ(found->eos_token, "<|eot_id|>");

  std::ofstream(dir / "tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})";
  EXPECT_EQ(find_chat_template(dir)->source, "D");
  EXPECT_EQ(find_chat_template(dir)->bos_token, "");

  std::ofstream(dir / "chat_template.jinja") << "J";  // the .jinja file wins
  EXPECT_EQ(find_chat_template(dir)->source, "J");
  fs::remove(dir / "chat_template.jinja");

  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": 3})";
  EXPECT_EQ(error_of([&] { find_chat_template(dir); }),
            (dir / "tokenizer_config.json").string() +
                ": 'chat_template' must be a string or a list of {name, template}, got number");
  std::ofstream(dir / "tokenizer_config.json") << "{";
  EXPECT_NE(error_of([&] { find_chat_template(dir); }).find("tokenizer_config.json: invalid JSON"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace unstuck::tokenizer
