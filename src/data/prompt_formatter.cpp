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

std::string PromptFormatter::render(const TaskRecord& record) const {
  if (!chat_) {
    if (!record.messages.empty())
      throw UserError("the record's prompt is a list of messages (data.prompt_key '" + config_.prompt_key +
                      "'); set data.chat_template to auto or a .jinja file to render it");
    return format_prompt(record, config_);
  }
  std::vector<tokenizer::ChatMessage> messages;
  const bool own_system = !record.messages.empty() && record.messages[0].value("role", "") == "system";
  if (!config_.system_prompt.empty() && !own_system) messages.push_back({"system", config_.system_prompt});
  if (record.messages.empty()) {
    messages.push_back({"user", format_prompt(record, config_)});
  } else {
    for (const auto& m : record.messages)
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  if (tools_.is_null()) return chat_->apply(messages, true, bos_token_, eos_token_);
  nlohmann::ordered_json context;
  context["messages"] = nlohmann::ordered_json::array();
  for (const tokenizer::ChatMessage& m : messages)
    context["messages"].push_back({{"role", m.role}, {"content", m.content}});
  context["tools"] = tools_;
  context["add_generation_prompt"] = true;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  return chat_->render(context);
}

PromptFormatter PromptFormatter::with_tools(nlohmann::ordered_json tools) const {
  if (!chat_)
    throw UserError("tools need a chat template to render them: set data.chat_template to auto or a .jinja file");
  PromptFormatter copy = *this;
  copy.tools_ = std::move(tools);
  return copy;
}

std::string PromptFormatter::render_conversation(const nlohmann::ordered_json& messages,
                                                 bool add_generation_prompt) const {
  if (!chat_)
    throw UserError("tools need a chat template to render them: set data.chat_template to auto or a .jinja file");
  nlohmann::ordered_json context;
  context["messages"] = messages;
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
