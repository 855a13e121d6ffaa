// Tokenizer: one interface over a SentencePiece processor (tokenizer.model) and our tokenizer.json
// pipeline (hf_tokenizer.h). Chooses the file from a model directory, reads tokenizer_config.json's
// special tokens, and turns SentencePiece's status codes into exceptions naming the model file.
// Training lives in train_tokenizer.cpp.
#include "unstuck/tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/sp_model_proto.h"
#include "tokenizer/sp_to_hf.h"
#include "unstuck/common/error.h"

namespace unstuck::tokenizer {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<sentencepiece::SentencePieceProcessor> checked_processor(
    const sentencepiece::util::Status& status, std::unique_ptr<sentencepiece::SentencePieceProcessor> processor,
    const std::string& source) {
  if (!status.ok()) {
    throw UserError("tokenizer model '" + source + "' is not a valid SentencePiece model (" + status.ToString() +
                    "); train one with `unstuck tokenizer train`");
  }
  return processor;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read '" + path.string() + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json read_json(const fs::path& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw UserError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

bool looks_like_json(const std::string& bytes) {
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string::npos && bytes[first] == '{';
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> processor, std::string source)
    : processor_(std::move(processor)), source_(std::move(source)) {
  bos_id_ = processor_->bos_id();
  eos_id_ = processor_->eos_id();
  // LlamaTokenizer's defaults (add_bos_token = true, add_eos_token = false).
  adds_bos_ = bos_id_ >= 0;
}

Tokenizer::Tokenizer(std::unique_ptr<HfTokenizer> hf, std::string source)
    : hf_(std::move(hf)), source_(std::move(source)) {
  adds_bos_ = !hf_->template_prefix().empty();
  adds_eos_ = !hf_->template_suffix().empty();
  if (adds_bos_) bos_id_ = hf_->template_prefix().front();
  if (adds_eos_) eos_id_ = hf_->template_suffix().back();
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

fs::path Tokenizer::file_in_directory(const fs::path& dir) {
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    if (fs::is_regular_file(dir / name)) return dir / name;
  }
  throw UserError("model directory '" + dir.string() + "' has neither tokenizer.json nor tokenizer.model");
}

void copy_tokenizer_files(const fs::path& source, const fs::path& out) {
  static constexpr const char* kFiles[] = {"tokenizer.json",    "tokenizer_config.json",
                                           "tokenizer.model",   "special_tokens_map.json",
                                           "added_tokens.json", "vocab.json",
                                           "merges.txt",        "chat_template.jinja"};
  std::error_code ec;
  if (fs::is_directory(source, ec)) {
    (void)Tokenizer::file_in_directory(source);  // names the directory when it holds no tokenizer
    for (const char* name : kFiles)
      if (fs::is_regular_file(source / name))
        fs::copy_file(source / name, out / name, fs::copy_options::overwrite_existing);
    return;
  }
  if (!fs::is_regular_file(source, ec)) throw UserError("tokenizer '" + source.string() + "' does not exist");
  const fs::path name = source.extension() == ".model" ? fs::path("tokenizer.model") : source.filename();
  fs::copy_file(source, out / name, fs::copy_options::overwrite_existing);
}

Tokenizer Tokenizer::load(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path file = file_in_directory(path);
    const fs::path config_path = path / "tokenizer_config.json";
    if (!fs::is_regular_file(config_path)) return load(file);
    const nlohmann::json config = read_json(config_path);
    Tokenizer tok = load(file);
    if (tok.processor_ && names_llama_tokenizer(config)) {
      // A Llama 2 / Mistral style directory: tokenize as transformers' LlamaTokenizer does.
      const std::string source = file.string() + " (as LlamaTokenizer)";
      tok = Tokenizer(std::make_unique<HfTokenizer>(llama_tokenizer_json(*tok.processor_, config), source), source);
    }
    tok.apply_config(config, config_path);
    return tok;
  }
  if (!fs::is_regular_file(path, ec)) {
    throw UserError("tokenizer model '" + path.string() +
                    "' not found; pass a model directory, a tokenizer.json or the .model file "
                    "written by `unstuck tokenizer train`");
  }
  if (path.extension() == ".json") {
    return Tokenizer(std::make_unique<HfTokenizer>(read_file(path), path.string()), path.string());
  }
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->Load(path.string());
  return Tokenizer(checked_processor(status, std::move(processor), path.string()), path.string());
}

Tokenizer Tokenizer::from_serialized(const std::string& bytes, const std::string& source) {
  if (looks_like_json(bytes)) return Tokenizer(std::make_unique<HfTokenizer>(bytes, source), source);
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(bytes);
  return Tokenizer(checked_processor(status, std::move(processor), source), source);
}

void Tokenizer::apply_config(const nlohmann::json& config, const fs::path& config_json) {
  const auto resolve = [&](const char* key, int32_t* id) {
    if (!config.contains(key) || config[key].is_null()) return;
    const std::string name = config_token_name(config[key]);
    const int32_t found = piece_to_id(name);
    if (found < 0) {
      throw UserError(config_json.string() + ": " + key + " '" + name + "' is not in the vocabulary of " + source_);
    }
    *id = found;
  };
  resolve("bos_token", &bos_id_);
  resolve("eos_token", &eos_id_);
  resolve("pad_token", &pad_id_);
  // For tokenizer.json the post_processor decides what encode_for_model() adds, as in
  // `tokenizers`; for SentencePiece these flags do (LlamaTokenizer's semantics).
  if (processor_) {
    adds_bos_ = config.value("add_bos_token", true) && bos_id_ >= 0;
    adds_eos_ = config.value("add_eos_token", false) && eos_id_ >= 0;
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool add_eos) const {
  std::vector<int32_t> out;
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  if (hf_) {
    const std::vector<int32_t> ids = hf_->encode(text, false);
    out.insert(out.end(), ids.begin(), ids.end());
  } else {
    std::vector<int> ids;
    const auto status = processor_->Encode(text, &ids);
    if (!status.ok()) {
      throw std::runtime_error("SentencePiece failed to encode with '" + source_ + "': " + status.ToString());
    }
    out.insert(out.end(), ids.begin(), ids.end());
  }
  if (add_eos && eos_id() >= 0) out.push_back(eos_id());
  return out;
}

std::vector<int32_t> Tokenizer::encode_for_model(std::string_view text) const {
  if (hf_) return hf_->encode(text, true);
  return encode(text, adds_bos_, adds_eos_);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  for (const int32_t id : ids) check_id(id);
  if (hf_) return hf_->decode(ids, skip_special_tokens);
  std::string text;
  std::vector<int> run;
  const auto flush = [&] {
    std::string piece;
    const auto status = processor_->Decode(run, &piece);
    if (!status.ok()) {
      throw std::runtime_error("SentencePiece failed to decode with '" + source_ + "': " + status.ToString());
    }
    text += piece;
    run.clear();
  };
  for (const int32_t id : ids) {
    // SentencePiece drops control pieces; spell them out when asked to keep special tokens.
    if (!skip_special_tokens && processor_->IsControl(id)) {
      flush();
      text += processor_->IdToPiece(id);
    } else {
      run.push_back(id);
    }
  }
  flush();
  return text;
}

int32_t Tokenizer::vocab_size() const { return hf_ ? hf_->vocab_size() : processor_->GetPieceSize(); }
int32_t Tokenizer::bos_id() const { return bos_id_; }
int32_t Tokenizer::eos_id() const { return eos_id_; }
int32_t Tokenizer::unk_id() const { return hf_ ? hf_->unk_id() : processor_->unk_id(); }
bool Tokenizer::has_pad_piece() const { return pad_id_ >= 0 || (processor_ && processor_->pad_id() >= 0); }

int32_t Tokenizer::pad_id() const {
  if (pad_id_ >= 0) return pad_id_;
  if (processor_ && processor_->pad_id() >= 0) return processor_->pad_id();
  if (eos_id() >= 0) return eos_id();
  return unk_id() >= 0 ? unk_id() : 0;
}

std::vector<AddedTokenInfo> Tokenizer::added_tokens() const {
  std::vector<AddedTokenInfo> out;
  if (hf_) {
    for (const AddedToken& t : hf_->added_tokens()) out.push_back({t.id, t.content, t.special});
  } else {
    const SpModelInfo info = read_sp_model_info(processor_->serialized_model_proto());
    for (int32_t id = 0; id < static_cast<int32_t>(info.piece_types.size()); ++id) {
      const int type = info.piece_types[id];
      if (type == SpModelInfo::control || type == SpModelInfo::unknown || type == SpModelInfo::user_defined) {
        out.push_back({id, processor_->IdToPiece(id), type != SpModelInfo::user_defined});
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  return out;
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  check_id(id);
  if (hf_) {
    const std::string* token = hf_->id_to_token(id);
    return token ? *token : std::string();
  }
  return processor_->IdToPiece(id);
}

int32_t Tokenizer::piece_to_id(std::string_view piece) const {
  if (hf_) return hf_->token_to_id(piece);
  // SentencePiece answers unk_id() for unknown pieces; tell those apart from "<unk>" itself.
  const int id = processor_->PieceToId(piece);
  if (id == processor_->unk_id() && processor_->IdToPiece(id) != piece) return -1;
  return id;
}

std::string Tokenizer::serialized() const { return hf_ ? hf_->json_text() : processor_->serialized_model_proto(); }

void Tokenizer::check_id(int32_t id) const {
  const bool known = id >= 0 && id < vocab_size() && (!hf_ || hf_->id_to_token(id) != nullptr);
  if (!known) {
    throw UserError("token id " + std::to_string(id) + " is outside the vocabulary of '" + source_ + "' (size " +
                    std::to_string(vocab_size()) + "); do the model and the tokenizer belong together?");
  }
}

}  // namespace unstuck::tokenizer
