// Chat templates: the Jinja subset that Hugging Face chat templates in the ChatML (Qwen2.5/Qwen3),
// Llama-3 and Mistral-instruct styles use, rendered as transformers' apply_chat_template renders
// them (trim_blocks and lstrip_blocks on). Anything outside the subset is refused at parse time
// naming the construct and its line/column. docs/TASKS.md lists the subset.
#pragma once

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace unstuck::tokenizer {

namespace jinja {
struct Template;  // the parsed template (src/tokenizer/jinja_ast.h)
}

struct ChatMessage {
  std::string role;     // system, user, assistant
  std::string content;  // the message text
};

// Bounds that keep a hostile or broken template from running away.
struct ChatTemplateLimits {
  int max_nesting = 64;                   // nested blocks / expressions while parsing
  int64_t max_loop_iterations = 1000000;  // for-loop iterations in one render
  int64_t max_output_bytes = 64ll << 20;  // rendered text
};

class ChatTemplate {
 public:
  // Parses `source` (the Jinja text). `name` (a file, "tokenizer_config.json:chat_template") prefixes
  // every error. Throws UserError for a syntax error or a construct outside the subset, e.g.
  // "chat template t.jinja: line 3, column 8: unsupported filter 'wordwrap' (supported: ...)".
  static ChatTemplate parse(const std::string& source, const std::string& name, const ChatTemplateLimits& limits = {});

  // Renders with `context` (a JSON object: messages, add_generation_prompt, bos_token, ...). Throws
  // UserError for raise_exception(...) (its message), an undefined variable's attribute, a limit.
  std::string render(const nlohmann::ordered_json& context) const;

  // apply_chat_template(messages, add_generation_prompt=...) with the special tokens' text:
  //   ChatML, [{user, "2+2?"}], true -> "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt, const std::string& bos_token,
                    const std::string& eos_token) const;

  const std::string& name() const { return name_; }

 private:
  ChatTemplate(std::shared_ptr<const jinja::Template> parsed, std::string name, ChatTemplateLimits limits);
  std::shared_ptr<const jinja::Template> parsed_;
  std::string name_;
  ChatTemplateLimits limits_;
};

// What a model directory says about chat formatting.
struct ModelChatTemplate {
  std::string source;     // the Jinja text
  std::string origin;     // "dir/chat_template.jinja" or "dir/tokenizer_config.json:chat_template"
  std::string bos_token;  // tokenizer_config.json's bos_token ("" when absent or null)
  std::string eos_token;  // tokenizer_config.json's eos_token
};

// The chat template of a Hugging Face model directory: chat_template.jinja when present, else
// tokenizer_config.json's "chat_template" (a string, or a list of {name, template} where "default"
// is taken). nullopt when the directory has neither. Throws UserError for a malformed
// tokenizer_config.json (naming the file and key).
std::optional<ModelChatTemplate> find_chat_template(const std::filesystem::path& model_dir);

// bos_token / eos_token of `model_dir`/tokenizer_config.json (a string or {"content": ...}); empty
// strings when the file or the key is absent.
ModelChatTemplate read_special_tokens(const std::filesystem::path& model_dir);

}  // namespace unstuck::tokenizer
