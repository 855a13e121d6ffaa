// Options of the tokenizer component in the run config: which SentencePiece model a run uses.
#pragma once

#include <string>

namespace unstuck::tokenizer {

struct TokenizerConfig {
  std::string path;  // .model file; empty = data/<task>/tokenizer.model

  template <class V>
  void visit(V& v) {
    v("path", path, "SentencePiece .model file; empty: data/<task>/tokenizer.model");
  }
};

}  // namespace unstuck::tokenizer
