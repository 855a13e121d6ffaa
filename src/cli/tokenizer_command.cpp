// `unstuck tokenizer ...`: train a SentencePiece tokenizer on a text corpus, or show how a
// tokenizer (a model directory, tokenizer.json or .model file) encodes a text (ids and pieces).
// Conventions (special ids, round trips, supported formats): docs/TOKENIZER.md.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::cli {
namespace {

// Shows control characters in pieces ("\n", "\t") so every piece prints on one line.
std::string printable_piece(const std::string& piece) {
  std::string out;
  for (const char c : piece) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '"' || c == '\\') {
      out += std::string("\\") + c;
    } else {
      out += c;
    }
  }
  return out;
}

// Command-line values of `tokenizer train`; the callback turns them into TrainOptions.
struct TrainArgs {
  tokenizer::TrainOptions options;
  std::string model_type = "char";
  bool no_whitespace_pieces = false;
};

void add_train(CLI::App& parent) {
  auto args = std::make_shared<TrainArgs>();
  tokenizer::TrainOptions& opts = args->options;
  CLI::App* train =
      parent.add_subcommand("train", "Train a SentencePiece tokenizer (writes <out> and its .vocab next to it)");
  train->add_option("--input", opts.input, "training corpus: UTF-8 text, one sentence per line")->required();
  train->add_option("--out", opts.output, "path of the .model file to write")->required();
  std::vector<std::string> type_names;
  for (const auto& entry : tokenizer::kModelTypeNames) type_names.emplace_back(entry.second);
  train->add_option("--model-type", args->model_type, "char, bpe or unigram")
      ->check(CLI::IsMember(type_names))
      ->capture_default_str();
  train
      ->add_option("--vocab-size", opts.vocab_size,
                   "pieces including the 4 special ids and user symbols; bpe/unigram: exact "
                   "size (required); char: upper bound, 0 = every character of the corpus")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  train
      ->add_option("--user-symbols", opts.user_defined_symbols,
                   "comma-separated pieces that always encode as one token, e.g. "
                   "'<answer>,</answer>'")
      ->delimiter(',');
  train->add_flag("--no-whitespace-pieces", args->no_whitespace_pieces, "do not add newline and tab as pieces");
  train->callback([args] {
    tokenizer::TrainOptions& opts = args->options;
    for (const auto& [type, name] : tokenizer::kModelTypeNames) {
      if (args->model_type == name) opts.model_type = type;
    }
    opts.whitespace_pieces = !args->no_whitespace_pieces;
    const auto model = tokenizer::train_tokenizer(opts);
    const auto tok = tokenizer::Tokenizer::load(model);
    std::cout << "wrote " << model.string() << " and "
              << std::filesystem::path(model).replace_extension(".vocab").string() << ": " << args->model_type
              << " model, " << tok.vocab_size() << " pieces (pad " << tok.pad_id() << ", unk " << tok.unk_id()
              << ", bos " << tok.bos_id() << ", eos " << tok.eos_id() << ")\n";
  });
}

void add_encode(CLI::App& parent) {
  auto model = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  auto special = std::make_shared<bool>(false);
  CLI::App* encode = parent.add_subcommand("encode", "Print the token ids and pieces of a text");
  encode
      ->add_option("--model", *model,
                   "model directory (tokenizer.json or tokenizer.model), tokenizer.json or .model file")
      ->required();
  encode->add_option("--text", *text, "text to encode")->required();
  encode->add_flag("--special", *special,
                   "add the special tokens the model was trained with (BOS/EOS), as AutoTokenizer does");
  encode->callback([model, text, special] {
    const auto tok = tokenizer::Tokenizer::load(*model);
    const std::vector<int32_t> ids = *special ? tok.encode_for_model(*text) : tok.encode(*text);
    std::string id_line;
    std::string piece_line;
    for (const int32_t id : ids) {
      id_line += (id_line.empty() ? "" : " ") + std::to_string(id);
      piece_line += (piece_line.empty() ? "\"" : " \"") + printable_piece(tok.id_to_piece(id));
      piece_line += "\"";
    }
    std::cout << "tokens: " << ids.size() << "\n"
              << "ids:    " << id_line << "\n"
              << "pieces: " << piece_line << "\n";
  });
}

}  // namespace

void add_tokenizer_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "tokenizer", "Train SentencePiece tokenizers and inspect encodings (tokenizer.json or .model)");
  add_train(*command);
  add_encode(*command);
  // Bare `unstuck tokenizer` prints this command's help.
  command->callback([command] {
    if (command->get_subcommands().empty()) throw CLI::CallForHelp();
  });
}

}  // namespace unstuck::cli
