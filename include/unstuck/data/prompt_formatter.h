// The text a record becomes before tokenization, exactly as the model sees it. Without a chat
// template: data.prompt_template filled from the record (the caller puts BOS in front). With one
// (data.chat_template auto or a file): the record's messages, or one user message made from
// prompt_template, after an optional data.system_prompt, rendered with add_generation_prompt as
// transformers' apply_chat_template does; the template writes BOS itself when the model wants it.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "unstuck/data/data_config.h"
#include "unstuck/data/record.h"
#include "unstuck/tokenizer/chat_template.h"

namespace unstuck::data {

class PromptFormatter {
 public:
  // `model_dir` is where `auto` looks (the tokenizer's folder). Throws UserError for `auto` when
  // the directory has no chat template, for a template file that cannot be read or parsed, and
  // names data.chat_template.
  PromptFormatter(const DataConfig& config, const std::filesystem::path& model_dir);

  // Prompt text of a record. Throws UserError for a record given as messages when no chat
  // template is configured (naming data.chat_template), and for raise_exception() in a template.
  //   none, "12+35="                     -> "12+35="
  //   ChatML template, system_prompt "Be brief.", prompt "2+2?"
  //     -> "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
  // `appended` (an environment's reset() observation, as TRL adds it) goes at the end of the last
  // prompt message's content; it needs a chat template.
  std::string render(const TaskRecord& record, const std::string& appended = "") const;

  // True without a chat template: the prompt is BOS + render() (the convention of our own
  // tokenizers). With one, the ids are the rendered text's alone, as apply_chat_template(tokenize=True).
  bool prepend_bos() const { return !chat_; }

  // A copy that renders `tools` (JSON schemas, [{"type": "function", "function": {...}}, ...]) into
  // every prompt, as apply_chat_template(messages, tools=...) does. Needs a chat template.
  PromptFormatter with_tools(nlohmann::ordered_json tools) const;
  // apply_chat_template(messages, add_generation_prompt=...) of a conversation given as JSON
  // messages (assistant tool_calls, tool messages), without the tools: what TRL renders to find the
  // tokens of a tool result. Needs a chat template.
  std::string render_conversation(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
  // The template's eos_token text ("" when none).
  const std::string& eos_token() const { return eos_token_; }
  // Where the prompt format comes from, for logs: "data.prompt_template" or the template's origin.
  std::string describe() const;

 private:
  // Throws UserError "<what>: set data.chat_template to ..." when no chat template is configured.
  void require_chat_template(const std::string& what) const;
  // The chat template applied to {messages, tools (when not null), add_generation_prompt,
  // bos_token, eos_token}: the one place a template context is built.
  std::string render_messages(nlohmann::ordered_json messages, const nlohmann::ordered_json& tools,
                              bool add_generation_prompt) const;

  DataConfig config_;
  std::shared_ptr<const tokenizer::ChatTemplate> chat_;
  std::string bos_token_, eos_token_;
  nlohmann::ordered_json tools_;  // null: no tools
};

}  // namespace unstuck::data
