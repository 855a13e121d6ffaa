// What transformers' AutoTokenizer builds from a SentencePiece tokenizer.model when the directory's
// tokenizer_config.json names LlamaTokenizer (Llama 2, Mistral, TinyLlama): a tokenizer.json-style
// BPE with merges generated from the vocabulary, Metaspace, byte fallback, the model's control and
// user-defined pieces as added tokens, and BOS/EOS from add_bos_token / add_eos_token.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace unstuck::tokenizer {

// A special token as tokenizer_config.json names it: "<s>" or {"content": "<s>", ...}; "" otherwise.
std::string config_token_name(const nlohmann::json& j);

// True when tokenizer_config.json asks for LlamaTokenizer (the class whose conversion we mirror).
bool names_llama_tokenizer(const nlohmann::json& config);

// The tokenizer.json text transformers (5.x) would build for `sp` under `config`.
std::string llama_tokenizer_json(const sentencepiece::SentencePieceProcessor& sp, const nlohmann::json& config);

}  // namespace unstuck::tokenizer
