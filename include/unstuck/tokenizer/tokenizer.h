// Tokenizers: a Hugging Face tokenizer.json (byte-level BPE of GPT-2 / Llama 3 / Qwen2, or the
// SentencePiece-style BPE of Llama 2 / Mistral) or a SentencePiece .model file, chosen from what a
// model directory holds; encode/decode text to token ids; train SentencePiece models. Tokenizers we
// train round-trip text exactly and use fixed special ids (kPadId ... kEosId). docs/TOKENIZER.md.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace unstuck::tokenizer {

class HfTokenizer;

// Which kind of file a Tokenizer was loaded from.
enum class TokenizerFormat {
  sentencepiece,   // tokenizer.model (SentencePiece protobuf)
  tokenizer_json,  // tokenizer.json (Hugging Face `tokenizers`)
};

// An added token (tokenizer.json's added_tokens, a SentencePiece control or user-defined piece):
// matched as a whole in text before any subword splitting.
struct AddedTokenInfo {
  int32_t id;
  std::string content;
  bool special;  // special tokens (BOS, EOS, chat markers) are dropped by decode() by default
};

// Special ids of every tokenizer train_tokenizer() writes; user-defined symbols follow from 4 on
// in the order given. Models trained elsewhere keep their own ids (see Tokenizer).
inline constexpr int32_t kPadId = 0;  // "<pad>"
inline constexpr int32_t kUnkId = 1;  // "<unk>": characters the corpus never contained
inline constexpr int32_t kBosId = 2;  // "<s>"
inline constexpr int32_t kEosId = 3;  // "</s>"

class Tokenizer {
 public:
  // Loads `path`: a model directory, a tokenizer.json file or a SentencePiece .model file. In a
  // directory tokenizer.json is preferred over tokenizer.model (as transformers does), and
  // tokenizer_config.json, when present, names the bos/eos/pad tokens and (for SentencePiece) says
  // whether BOS/EOS are added; a tokenizer.model whose config names LlamaTokenizer is tokenized as
  // transformers' AutoTokenizer does (Metaspace, added tokens matched in text; docs/TOKENIZER.md).
  // Throws UserError naming the path when nothing loadable is there, and naming the JSON path of
  // any tokenizer.json component that is not supported.
  static Tokenizer load(const std::filesystem::path& path);
  // The tokenizer file load() uses in model directory `dir` (tokenizer.json, else tokenizer.model).
  static std::filesystem::path file_in_directory(const std::filesystem::path& dir);
  // Loads a tokenizer from serialized() bytes (a .model file or tokenizer.json text, e.g. kept
  // inside a checkpoint); `source` names it in errors.
  static Tokenizer from_serialized(const std::string& bytes, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`, optionally framed by bos_id() / eos_id() (when the model has them).
  // "12+35=<answer>47</answer>" -> [1, 2, +, 3, 5, =, <answer>, 4, 7, </answer>] with a char model.
  // Added/special tokens written in the text ("<|im_start|>") encode as their id (tokenizer.json).
  std::vector<int32_t> encode(std::string_view text, bool add_bos = false, bool add_eos = false) const;
  // Token ids as the model saw them in training: what transformers' AutoTokenizer gives for
  // `tokenizer(text)["input_ids"]` (tokenizer.json: its post_processor template, e.g. Llama's BOS;
  // SentencePiece: add_bos_token / add_eos_token of tokenizer_config.json, default BOS only).
  std::vector<int32_t> encode_for_model(std::string_view text) const;
  bool adds_bos() const { return adds_bos_; }  // whether encode_for_model() starts with bos_id()
  bool adds_eos() const { return adds_eos_; }  // whether encode_for_model() ends with eos_id()
  // Text of `ids`. Special tokens (pad, bos, eos, chat markers) decode to nothing unless
  // `skip_special_tokens` is false; SentencePiece's unk decodes to " ⁇ ". Throws UserError for an
  // id outside the vocabulary (a model whose vocabulary does not match this tokenizer).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1 when the model has no bos piece
  int32_t eos_id() const;  // -1 when the model has no eos piece
  int32_t unk_id() const;
  // The model's pad id. Models without a pad piece (SentencePiece's default, Llama's) pad with
  // eos_id() (or unk_id() when there is no eos either): padded positions are always masked out,
  // so the id only has to be a valid one. has_pad_piece() tells which case applies.
  int32_t pad_id() const;
  bool has_pad_piece() const;

  TokenizerFormat format() const { return hf_ ? TokenizerFormat::tokenizer_json : TokenizerFormat::sentencepiece; }
  // Added and special tokens, in id order.
  std::vector<AddedTokenInfo> added_tokens() const;

  // The piece of `id` ("▁" stands for a space; "Ġ" in byte-level BPE). Throws UserError for an
  // id out of range.
  std::string id_to_piece(int32_t id) const;
  // The id of `piece`, or -1 when the vocabulary has no such piece.
  int32_t piece_to_id(std::string_view piece) const;

  // The bytes of the .model file or the tokenizer.json text, for from_serialized().
  std::string serialized() const;
  // Where the model came from (path or `source`), for messages.
  const std::string& source() const { return source_; }

 private:
  Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> processor, std::string source);
  Tokenizer(std::unique_ptr<HfTokenizer> hf, std::string source);
  // Reads tokenizer_config.json (`config`, from `path`): bos/eos/pad tokens, add_bos/eos_token.
  void apply_config(const nlohmann::json& config, const std::filesystem::path& path);
  void check_id(int32_t id) const;

  // Exactly one of processor_ (tokenizer.model) and hf_ (tokenizer.json) is set.
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::unique_ptr<HfTokenizer> hf_;
  std::string source_;
  bool adds_bos_ = false;
  bool adds_eos_ = false;
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;  // tokenizer.json / tokenizer_config.json
};

// Copies the tokenizer at `source` into directory `out` so that Tokenizer::load(out) and
// transformers' AutoTokenizer load the same tokenizer: from a model directory every tokenizer file
// it holds (tokenizer.json, tokenizer.model, tokenizer_config.json, chat_template.jinja, ...); from
// a single .model file that file as tokenizer.model, from a tokenizer.json that file.
void copy_tokenizer_files(const std::filesystem::path& source, const std::filesystem::path& out);

// ---- training -------------------------------------------------------------------------------

// SentencePiece model types offered by `unstuck tokenizer train`.
enum class ModelType {
  character,  // one piece per character: the tiny vocabularies of synthetic arithmetic tasks
  bpe,        // byte-pair merges
  unigram,    // unigram language model (SentencePiece's default)
};

inline constexpr std::array<std::pair<ModelType, const char*>, 3> kModelTypeNames{{
    {ModelType::character, "char"},
    {ModelType::bpe, "bpe"},
    {ModelType::unigram, "unigram"},
}};
constexpr const auto& enum_names(ModelType) { return kModelTypeNames; }

struct TrainOptions {
  std::string input;                              // corpus: UTF-8 text, one sentence a line
  std::string output = "tokenizer.model";         // model path; the .vocab file goes next to it
  ModelType model_type = ModelType::character;    // char, bpe or unigram
  int64_t vocab_size = 0;                         // bpe/unigram: exact; char: bound, 0 = all
  std::vector<std::string> user_defined_symbols;  // pieces never split, e.g. <answer>, </answer>
  bool whitespace_pieces = true;                  // add "\n" and "\t" as pieces

  template <class V>
  void visit(V& v) {
    v("input", input, "training corpus: UTF-8 text, one sentence per line");
    v("output", output, "path of the .model file; the .vocab file is written next to it");
    v("model_type", model_type, "char, bpe or unigram");
    v("vocab_size", vocab_size,
      "pieces including the 4 special ids and the user symbols; bpe/unigram: exact size; "
      "char: upper bound, 0 = every character of the corpus");
    v("user_defined_symbols", user_defined_symbols,
      "pieces that always encode as one token, e.g. [<answer>, </answer>]");
    v("whitespace_pieces", whitespace_pieces,
      "add newline and tab as pieces (SentencePiece never learns them from a corpus read line by "
      "line), so multi-line prompts round-trip");
  }
};

// Trains a SentencePiece model on options.input and writes <output> and <output minus
// .model>.vocab (replacing them only once training succeeded). Special ids are kPadId, kUnkId,
// kBosId, kEosId; character coverage 1.0; identity normalization, no dummy prefix and no
// whitespace collapsing, so decode(encode(text)) == text for text made of corpus characters;
// bpe/unigram split digits into single pieces. Returns the path of the .model file. Throws
// UserError naming the option to fix (missing corpus, vocab_size too small or too large, ...).
std::filesystem::path train_tokenizer(const TrainOptions& options);

}  // namespace unstuck::tokenizer
