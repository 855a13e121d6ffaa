// The few fields of a SentencePiece ModelProto that the processor's API does not expose: each
// piece's type (user-defined pieces), the model type and the normalizer's dummy-prefix and
// whitespace flags. Read straight from the protobuf wire format (no generated code needed).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unstuck::tokenizer {

struct SpModelInfo {
  enum PieceType { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };
  std::vector<int> piece_types;          // by id
  int model_type = 1;                    // 1 unigram, 2 bpe, 3 word, 4 char
  bool add_dummy_prefix = true;          // normalizer_spec.add_dummy_prefix
  bool remove_extra_whitespaces = true;  // normalizer_spec.remove_extra_whitespaces
};

// Parses the serialized ModelProto; throws std::runtime_error on malformed bytes.
SpModelInfo read_sp_model_info(const std::string& bytes);

}  // namespace unstuck::tokenizer
