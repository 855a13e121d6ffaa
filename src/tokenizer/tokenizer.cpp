// Tokenizer: a thin wrapper over sentencepiece::SentencePieceProcessor that turns SentencePiece's
// status codes into exceptions naming the model file, and checks ids before SentencePiece sees
// them. Training lives in train_tokenizer.cpp.
#include "unstuck/tokenizer/tokenizer.h"

#include <sentencepiece_processor.h>

#include <stdexcept>
#include <system_error>

#include "unstuck/common/error.h"

namespace unstuck::tokenizer {
namespace {

std::unique_ptr<sentencepiece::SentencePieceProcessor> checked_processor(
    const sentencepiece::util::Status& status,
    std::unique_ptr<sentencepiece::SentencePieceProcessor> processor, const std::string& source) {
  if (!status.ok()) {
    throw UserError("tokenizer model '" + source + "' is not a valid SentencePiece model (" +
                    status.ToString() + "); train one with `unstuck tokenizer train`");
  }
  return processor;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<sentencepiece::SentencePieceProcessor> processor,
                     std::string source)
    : processor_(std::move(processor)), source_(std::move(source)) {}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw UserError("tokenizer model '" + path.string() +
                    "' not found; pass the .model file written by `unstuck tokenizer train`");
  }
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->Load(path.string());
  return Tokenizer(checked_processor(status, std::move(processor), path.string()), path.string());
}

Tokenizer Tokenizer::from_serialized(const std::string& bytes, const std::string& source) {
  auto processor = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = processor->LoadFromSerializedProto(bytes);
  return Tokenizer(checked_processor(status, std::move(processor), source), source);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos, bool add_eos) const {
  std::vector<int> ids;
  const auto status = processor_->Encode(text, &ids);
  if (!status.ok()) {
    throw std::runtime_error("SentencePiece failed to encode with '" + source_ +
                             "': " + status.ToString());
  }
  std::vector<int32_t> out;
  out.reserve(ids.size() + 2);
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  if (add_eos && eos_id() >= 0) out.push_back(eos_id());
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  for (const int32_t id : ids) check_id(id);
  std::string text;
  const auto status = processor_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) {
    throw std::runtime_error("SentencePiece failed to decode with '" + source_ +
                             "': " + status.ToString());
  }
  return text;
}

int32_t Tokenizer::vocab_size() const { return processor_->GetPieceSize(); }
int32_t Tokenizer::bos_id() const { return processor_->bos_id(); }
int32_t Tokenizer::eos_id() const { return processor_->eos_id(); }
int32_t Tokenizer::unk_id() const { return processor_->unk_id(); }
bool Tokenizer::has_pad_piece() const { return processor_->pad_id() >= 0; }

int32_t Tokenizer::pad_id() const {
  if (has_pad_piece()) return processor_->pad_id();
  return eos_id() >= 0 ? eos_id() : unk_id();
}

std::string Tokenizer::id_to_piece(int32_t id) const {
  check_id(id);
  return processor_->IdToPiece(id);
}

int32_t Tokenizer::piece_to_id(std::string_view piece) const {
  // SentencePiece answers unk_id() for unknown pieces; tell those apart from "<unk>" itself.
  const int id = processor_->PieceToId(piece);
  if (id == unk_id() && processor_->IdToPiece(id) != piece) return -1;
  return id;
}

std::string Tokenizer::serialized() const { return processor_->serialized_model_proto(); }

void Tokenizer::check_id(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw UserError("token id " + std::to_string(id) + " is outside the vocabulary of '" +
                    source_ + "' (size " + std::to_string(vocab_size()) +
                    "); do the model and the tokenizer belong together?");
  }
}

}  // namespace unstuck::tokenizer
