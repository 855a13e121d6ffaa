// train_tokenizer(): runs SentencePiece's trainer with the settings that make our tokenizers
// round-trip text exactly and keep fixed special ids, into temporary files that replace the output
// only once training (and the char vocabulary check) succeeded.
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <set>
#include <string>
#include <system_error>
#include <unordered_map>

#include "unstuck/common/error.h"
#include "unstuck/common/value_names.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::tokenizer {
namespace {

namespace fs = std::filesystem;

// A char model keeps every character of the corpus up to the vocabulary size it is given; we give
// it room for all of Unicode and check the result against the user's vocab_size afterwards, so a
// too-small size is an error instead of characters silently becoming <unk>.
constexpr int64_t kCharVocabCeiling = 0x110000 + 64;

void check_options(const TrainOptions& options) {
  std::error_code ec;
  if (options.input.empty()) {
    throw UserError("no training corpus given (--input / tokenizer.input)");
  }
  if (options.input.find(',') != std::string::npos) {  // SentencePiece splits `input` at commas
    throw UserError("training corpus path '" + options.input + "' must not contain ',' (--input)");
  }
  if (!fs::is_regular_file(options.input, ec)) {
    throw UserError("training corpus '" + options.input + "' not found (--input)");
  }
  if (options.output.empty()) throw UserError("no output path given (--out / tokenizer.output)");
  if (options.vocab_size < 0) {
    throw UserError("vocab_size must be >= 0, got " + std::to_string(options.vocab_size));
  }
  if (options.model_type != ModelType::character && options.vocab_size == 0) {
    throw UserError(std::string("a ") + enum_name(options.model_type) +
                    " tokenizer needs a vocab_size > 0 (--vocab-size)");
  }
  std::set<std::string> seen{"<pad>", "<unk>", "<s>", "</s>"};
  for (const std::string& symbol : options.user_defined_symbols) {
    if (symbol.empty() || symbol.find(',') != std::string::npos) {
      throw UserError("user-defined symbol '" + symbol +
                      "' must be non-empty and must not contain ',' (--user-symbols)");
    }
    if (!seen.insert(symbol).second) {
      throw UserError("user-defined symbol '" + symbol + "' is given twice or is a special piece (--user-symbols)");
    }
  }
}

std::string join_symbols(const TrainOptions& options) {
  std::vector<std::string> symbols = options.user_defined_symbols;
  if (options.whitespace_pieces) {
    for (const char* ws : {"\n", "\t"}) {
      bool present = false;
      for (const std::string& s : symbols) present = present || s == ws;
      if (!present) symbols.emplace_back(ws);
    }
  }
  std::string joined;
  for (const std::string& s : symbols) joined += (joined.empty() ? "" : ",") + s;
  return joined;
}

std::unordered_map<std::string, std::string> trainer_args(const TrainOptions& options,
                                                          const std::string& model_prefix) {
  const bool is_char = options.model_type == ModelType::character;
  const int64_t vocab_size = is_char ? kCharVocabCeiling : options.vocab_size;
  std::unordered_map<std::string, std::string> args{
      {"input", options.input},
      {"model_prefix", model_prefix},
      {"model_type", enum_name(options.model_type)},
      {"vocab_size", std::to_string(vocab_size)},
      {"character_coverage", "1.0"},
      // Exact round trips: no NFKC, no "▁" prepended to the text, no collapsing of spaces.
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"pad_id", std::to_string(kPadId)},
      {"unk_id", std::to_string(kUnkId)},
      {"bos_id", std::to_string(kBosId)},
      {"eos_id", std::to_string(kEosId)},
      // Silences SentencePiece's INFO and WARNING logs (a process-wide setting of the library).
      {"minloglevel", "2"},
  };
  if (is_char) args["hard_vocab_limit"] = "false";
  if (!is_char) args["split_digits"] = "true";  // "47" -> "4", "7": numbers are spelled digit-wise
  const std::string symbols = join_symbols(options);
  if (!symbols.empty()) args["user_defined_symbols"] = symbols;
  return args;
}

void remove_quietly(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
}

}  // namespace

fs::path train_tokenizer(const TrainOptions& options) {
  check_options(options);
  fs::path prefix = options.output;
  if (prefix.extension() == ".model") prefix.replace_extension();
  const fs::path model_path = fs::path(prefix).concat(".model");
  const fs::path vocab_path = fs::path(prefix).concat(".vocab");
  const fs::path dir = model_path.has_parent_path() ? model_path.parent_path() : fs::path(".");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw UserError("cannot create the output directory '" + dir.string() + "': " + ec.message() + " (--out)");
  }

  // Train next to the output, then rename: an existing tokenizer survives a failed run.
  const fs::path temp_prefix = dir / ("." + prefix.filename().string() + ".tmp-" + std::to_string(::getpid()));
  const fs::path temp_model = fs::path(temp_prefix).concat(".model");
  const fs::path temp_vocab = fs::path(temp_prefix).concat(".vocab");
  auto cleanup = [&] {
    remove_quietly(temp_model);
    remove_quietly(temp_vocab);
  };

  const auto status = sentencepiece::SentencePieceTrainer::Train(trainer_args(options, temp_prefix.string()));
  if (!status.ok()) {
    cleanup();
    throw UserError(std::string("SentencePiece could not train a ") + enum_name(options.model_type) +
                    " tokenizer on '" + options.input + "': " + status.ToString());
  }

  if (options.model_type == ModelType::character && options.vocab_size > 0) {
    const int32_t needed = Tokenizer::load(temp_model).vocab_size();
    if (needed > options.vocab_size) {
      cleanup();
      throw UserError("a char tokenizer of '" + options.input + "' needs " + std::to_string(needed) +
                      " pieces (special ids, user symbols and every character of the corpus) but "
                      "vocab_size is " +
                      std::to_string(options.vocab_size) + "; raise --vocab-size to at least " +
                      std::to_string(needed) + " or pass 0");
    }
  }

  fs::rename(temp_vocab, vocab_path, ec);
  if (!ec) fs::rename(temp_model, model_path, ec);
  if (ec) {
    cleanup();
    throw UserError("cannot write '" + model_path.string() + "': " + ec.message() + " (--out)");
  }
  return model_path;
}

}  // namespace unstuck::tokenizer
