// PromptFormatter: data.prompt_template alone, or the records' messages through the chat template
// that data.chat_template names (auto: the model directory's; or a .jinja file).
#include "unstuck/data/prompt_formatter.h"

#include <fstream>
#include <sstream>

#include "unstuck/common/error.h"

namespace unstuck::data {

PromptFormatter::PromptFormatter(const DataConfig& config, const std::filesystem::path& model_dir) : config_(config) {
  const std::string& choice = config.chat_template;
  if (choice.empty() || choice == "none") return;
  std::string source, origin;
  if (choice == "auto") {
    const auto found = tokenizer::find_chat_template(model_dir);
    if (!found)
      throw UserError("data.chat_template is auto but " + model_dir.string() +
                      " has no chat template (no chat_template.jinja, no \"chat_template\" in "
                      "tokenizer_config.json); name a .jinja file or set data.chat_template: none");
    source = found->source;
    origin = found->origin;
    bos_token_ = found->bos_token;
    eos_token_ = found->eos_token;
  } else {
    std::ifstream in(choice, std::ios::binary);
    if (!in) throw UserError("data.chat_template: cannot read '" + choice + "' (auto, none or a .jinja file)");
    std::ostringstream text;
    text << in.rdbuf();
    source = text.str();
    origin = choice;
    const tokenizer::ModelChatTemplate special = tokenizer::read_special_tokens(model_dir);
    bos_token_ = special.bos_token;
    eos_token_ = special.eos_token;
  }
  chat_ = std::make_shared<const tokenizer::ChatTemplate>(tokenizer::ChatTemplate::parse(source, origin));
}

std::string PromptFormatter::render(const TaskRecord& record, const std::string& appended) const {
  if (!chat_) {
    if (!record.messages.empty())
      throw UserError("the record's prompt is a list of messages (data.prompt_key '" + config_.prompt_key +
                      "'); set data.chat_template to auto or a .jinja file to render it");
    if (!appended.empty()) require_chat_template("an environment's observation is appended to a chat message");
    return format_prompt(record, config_);
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  const bool own_system = !record.messages.empty() && record.messages[0].value("role", "") == "system";
  if (!config_.system_prompt.empty() && !own_system)
    messages.push_back({{"role", "system"}, {"content", config_.system_prompt}});
  if (record.messages.empty()) {
    messages.push_back({{"role", "user"}, {"content", format_prompt(record, config_)}});
  } else {
    for (const auto& m : record.messages)
      messages.push_back({{"role", m["role"].get<std::string>()}, {"content", m["content"].get<std::string>()}});
  }
  if (!appended.empty()) messages.back()["content"] = messages.back()["content"].get<std::string>() + appended;
  return render_messages(std::move(messages), tools_, true);
}

PromptFormatter PromptFormatter::with_tools(nlohmann::ordered_json tools) const {
  require_chat_template("tools need a chat template to render them");
  PromptFormatter copy = *this;
  copy.tools_ = std::move(tools);
  return copy;
}

std::string PromptFormatter::render_conversation(const nlohmann::ordered_json& messages,
                                                 bool add_generation_prompt) const {
  require_chat_template("a conversation with tool calls needs a chat template to render it");
  return render_messages(messages, nullptr, add_generation_prompt);
}

void PromptFormatter::require_chat_template(const std::string& what) const {
  if (!chat_) throw UserError(what + ": set data.chat_template to auto or a .jinja file");
}

std::string PromptFormatter::render_messages(nlohmann::ordered_json messages, const nlohmann::ordered_json& tools,
                                             bool add_generation_prompt) const {
  nlohmann::ordered_json context;
  context["messages"] = std::move(messages);
  if (!tools.is_null()) context["tools"] = tools;
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  return chat_->render(context);
}

std::string PromptFormatter::describe() const {
  if (!chat_) return "data.prompt_template";
  const std::string tools = tools_.is_array() ? " with " + std::to_string(tools_.size()) + " tool(s)" : "";
  return "chat template " + chat_->name() + tools;
}

}  // namespace unstuck::data
