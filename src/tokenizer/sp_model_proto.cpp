// Minimal protobuf wire-format reader for SentencePiece's ModelProto (see sp_model_proto.h).
// Field numbers from sentencepiece_model.proto: ModelProto{1 pieces, 2 trainer_spec,
// 3 normalizer_spec}, SentencePiece{3 type}, TrainerSpec{3 model_type},
// NormalizerSpec{3 add_dummy_prefix, 4 remove_extra_whitespaces}.
#include "tokenizer/sp_model_proto.h"

#include <functional>
#include <stdexcept>
#include <string_view>

namespace unstuck::tokenizer {
namespace {

class Reader {
 public:
  explicit Reader(std::string_view bytes) : b_(bytes) {}
  bool done() const { return pos_ >= b_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= b_.size()) throw std::runtime_error("truncated varint");
      const auto c = static_cast<unsigned char>(b_[pos_++]);
      v |= static_cast<uint64_t>(c & 0x7F) << shift;
      if (!(c & 0x80)) return v;
    }
    throw std::runtime_error("varint too long");
  }
  // Calls `on_field(field, wire_type, reader)`; the callback consumes varints itself and gets
  // length-delimited payloads through `sub`; other fields are skipped.
  void fields(const std::function<void(uint32_t, uint64_t varint, std::string_view sub)>& on_field) {
    while (!done()) {
      const uint64_t key = varint();
      const auto field = static_cast<uint32_t>(key >> 3);
      switch (key & 7) {
        case 0:
          on_field(field, varint(), {});
          break;
        case 1:
          skip(8);
          break;
        case 2: {
          const uint64_t n = varint();
          if (n > b_.size() - pos_) throw std::runtime_error("truncated field");
          const std::string_view sub = b_.substr(pos_, n);
          pos_ += n;
          on_field(field, 0, sub);
          break;
        }
        case 5:
          skip(4);
          break;
        default:
          throw std::runtime_error("unsupported wire type");
      }
    }
  }

 private:
  void skip(size_t n) {
    if (n > b_.size() - pos_) throw std::runtime_error("truncated field");
    pos_ += n;
  }
  std::string_view b_;
  size_t pos_ = 0;
};

}  // namespace

SpModelInfo read_sp_model_info(const std::string& bytes) {
  SpModelInfo info;
  Reader(bytes).fields([&](uint32_t field, uint64_t, std::string_view sub) {
    if (field == 1) {
      int type = SpModelInfo::normal;
      Reader(sub).fields([&](uint32_t f, uint64_t v, std::string_view) {
        if (f == 3) type = static_cast<int>(v);
      });
      info.piece_types.push_back(type);
    } else if (field == 2) {
      Reader(sub).fields([&](uint32_t f, uint64_t v, std::string_view) {
        if (f == 3) info.model_type = static_cast<int>(v);
      });
    } else if (field == 3) {
      Reader(sub).fields([&](uint32_t f, uint64_t v, std::string_view) {
        if (f == 3) info.add_dummy_prefix = v != 0;
        if (f == 4) info.remove_extra_whitespaces = v != 0;
      });
    }
  });
  return info;
}

}  // namespace unstuck::tokenizer
