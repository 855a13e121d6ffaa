// The normalizers, pre-tokenizers and decoders a tokenizer.json file may name, for the model
// families we support (GPT-2, Llama 3, Qwen2 byte-level BPE; Llama 2 / Mistral SentencePiece-style
// BPE). Each is built from its JSON object; a component type we do not implement is refused with
// its type and JSON path, never skipped.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace unstuck::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};
// nullptr for a JSON null.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);

// A piece of text during pre-tokenization; `at_start` is true when it begins at offset 0 of the
// original input (Metaspace's prepend_scheme "first" prepends only there).
struct PreToken {
  std::string text;
  bool at_start;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their splits (empty pieces dropped).
  virtual void split(std::vector<PreToken>& pieces) const = 0;
};
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);

class Decoder {
 public:
  virtual ~Decoder() = default;
  // `tokenizers`' decode_chain: tokens in, tokens out; the caller concatenates the result.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);

// GPT-2's byte <-> printable character map used by ByteLevel pre-tokenizer and decoder.
const std::string& byte_to_unicode(unsigned char b);

}  // namespace unstuck::tokenizer
