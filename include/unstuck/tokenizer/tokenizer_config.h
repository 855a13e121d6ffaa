// Options of the tokenizer component in the run config: which tokenizer a run uses.
#pragma once

#include <string>

namespace unstuck::tokenizer {

struct TokenizerConfig {
  std::string path;  // model dir, tokenizer.json or .model; empty = data/<task>/tokenizer.model

  template <class V>
  void visit(V& v) {
    v("path", path,
      "tokenizer: a model directory, tokenizer.json or SentencePiece .model file; empty: "
      "data/<task>/tokenizer.model");
  }
};

}  // namespace unstuck::tokenizer
