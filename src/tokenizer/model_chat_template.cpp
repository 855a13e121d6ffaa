// A model directory's chat template (chat_template.jinja or tokenizer_config.json) and the text of
// its bos / eos tokens, as transformers reads them.
#include <fstream>
#include <sstream>

#include "unstuck/common/error.h"
#include "unstuck/tokenizer/chat_template.h"

namespace unstuck::tokenizer {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read '" + path.string() + "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::ordered_json read_tokenizer_config(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "tokenizer_config.json";
  if (!std::filesystem::exists(path)) return nlohmann::ordered_json::object();
  try {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(read_text(path));
    if (!j.is_object()) throw UserError(path.string() + ": expected a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path.string() + ": invalid JSON (" + e.what() + ")");
  }
}

std::string token_text(const nlohmann::ordered_json& config, const char* key, const std::string& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw UserError(file + ": '" + key + "' must be a string or {\"content\": ...}, got " + it->type_name());
}

}  // namespace

ModelChatTemplate read_special_tokens(const std::filesystem::path& model_dir) {
  const nlohmann::ordered_json config = read_tokenizer_config(model_dir);
  const std::string file = (model_dir / "tokenizer_config.json").string();
  ModelChatTemplate out;
  out.bos_token = token_text(config, "bos_token", file);
  out.eos_token = token_text(config, "eos_token", file);
  return out;
}

std::optional<ModelChatTemplate> find_chat_template(const std::filesystem::path& model_dir) {
  ModelChatTemplate out = read_special_tokens(model_dir);
  const auto jinja_file = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_file)) {
    out.source = read_text(jinja_file);
    out.origin = jinja_file.string();
    return out;
  }
  const nlohmann::ordered_json config = read_tokenizer_config(model_dir);
  const std::string file = (model_dir / "tokenizer_config.json").string();
  const auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  out.origin = file + ":chat_template";
  if (it->is_string()) {
    out.source = it->get<std::string>();
    return out;
  }
  if (it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string()) {
        out.source = entry["template"].get<std::string>();
        return out;
      }
    }
    throw UserError(file + ": 'chat_template' is a list without a {\"name\": \"default\", \"template\": ...} entry");
  }
  throw UserError(file + ": 'chat_template' must be a string or a list of {name, template}, got " + it->type_name());
}

}  // namespace unstuck::tokenizer
