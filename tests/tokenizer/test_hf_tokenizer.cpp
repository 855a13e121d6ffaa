// tokenizer.json parity: tokenizers trained in the test with the Python `tokenizers` library in
// each supported style (GPT-2, Llama 3, Qwen2 byte-level BPE; SentencePiece-style BPE with byte
// fallback, Metaspace and legacy forms) give the same ids and decodes in C++ on a seeded corpus of
// 2,000+ diverse strings (hf_tokenizers_ref.py); a SentencePiece tokenizer.model under several
// LlamaTokenizer configs gives transformers' AutoTokenizer ids. Unsupported components: refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/unicode_text.h"
#include "unstuck/common/error.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using nlohmann::json;
using unstuck::UserError;
using unstuck::tokenizer::Tokenizer;
using unstuck::tokenizer::TokenizerFormat;
namespace unicode = unstuck::tokenizer::unicode;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every style is checked inside one test, so the reference script (which trains all of them) runs
// once per ctest process.
const char* const kStyles[] = {"gpt2",
                               "llama3",
                               "qwen2",
                               "sentencepiece",
                               "sentencepiece_legacy",
                               "spm_llama2",
                               "spm_legacy",
                               "spm_bos_eos_no_prefix",
                               "spm_minimal"};

class HfTokenizerParity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("unstuck_hf_tok_" + std::to_string(::getpid())));
    fs::create_directories(*dir_);
    const std::string cmd = std::string(UNSTUCK_PYTHON) + " " + UNSTUCK_SOURCE_DIR +
                            "/tests/tokenizer/hf_tokenizers_ref.py make " + dir_->string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference script failed: " << cmd;
    reference_ = new json(json::parse(read_text(*dir_ / "reference.json")));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete reference_;
  }
  static fs::path* dir_;
  static json* reference_;
};

fs::path* HfTokenizerParity::dir_ = nullptr;
json* HfTokenizerParity::reference_ = nullptr;

void check_style(const fs::path& dir, const json& reference, const std::string& style) {
  SCOPED_TRACE(style);
  const Tokenizer tok = Tokenizer::load(dir / style);
  // tokenizer.json styles, and tokenizer.model directories whose config names LlamaTokenizer.
  ASSERT_EQ(tok.format(), TokenizerFormat::tokenizer_json);
  const json& strings = reference["strings"];
  const json& ref = reference["styles"][style];
  ASSERT_GE(strings.size(), 2000u);
  size_t ids_equal = 0, special_equal = 0, decode_equal = 0, skip_equal = 0, round_trips = 0, ref_round_trips = 0;
  for (size_t i = 0; i < strings.size(); ++i) {
    const std::string s = strings[i].get<std::string>();
    const std::vector<int32_t> want = ref["ids"][i].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok.encode(s);
    if (got == want) {
      ++ids_equal;
    } else if (ids_equal + 5 > i) {  // show the first few differences
      ADD_FAILURE() << style << " string " << i << " '" << s.substr(0, 80) << "': ids differ";
    }
    special_equal += tok.encode_for_model(s) == ref["ids_with_special"][i].get<std::vector<int32_t>>();
    const std::string decoded = tok.decode(want, /*skip_special_tokens=*/false);
    if (decoded == ref["decoded"][i].get<std::string>()) {
      ++decode_equal;
    } else if (decode_equal + 5 > i) {
      ADD_FAILURE() << style << " string " << i << " '" << s.substr(0, 80) << "': decode differs: '"
                    << decoded.substr(0, 80) << "' vs '" << ref["decoded"][i].get<std::string>().substr(0, 80) << "'";
    }
    skip_equal += tok.decode(want) == ref["decoded_skip_special"][i].get<std::string>();
    round_trips += tok.decode(got, false) == s;
    // Qwen2-style: the NFC normalizer makes text NFC; the lstrip/rstrip "<mask>" swallows the spaces
    // around it; the added token "café" decodes through the byte-level map to "caf\uFFFD" (as in
    // `tokenizers`). Everything else must come back exactly.
    const std::string nfc = unicode::normalize(s, unicode::NormalForm::nfc);
    if (style == "qwen2" && s.find("<mask>") == std::string::npos && nfc.find("café") == std::string::npos) {
      EXPECT_EQ(tok.decode(got, false), nfc) << "string " << i;
    }
    ref_round_trips += ref["decoded"][i].get<std::string>() == s;
  }
  const size_t n = strings.size();
  std::cout << "[parity] " << style << ": ids equal on " << ids_equal << "/" << n << ", with special tokens "
            << special_equal << "/" << n << ", decode equal " << decode_equal << "/" << n
            << ", decode(skip special) equal " << skip_equal << "/" << n << ", decode(encode(s)) == s on "
            << round_trips << "/" << n << " (reference: " << ref_round_trips << "/" << n << ")\n";
  EXPECT_EQ(ids_equal, n);
  EXPECT_EQ(special_equal, n);
  EXPECT_EQ(decode_equal, n);
  EXPECT_EQ(skip_equal, n);
  EXPECT_EQ(round_trips, ref_round_trips);
  // Byte-level BPE without a normalizer is lossless; NFC (qwen2) changes only non-NFC text, and
  // SentencePiece-style decoders drop one leading space (their own prefix) by design.
  if (style == "gpt2" || style == "llama3") EXPECT_EQ(round_trips, n);
}

// `unstuck tokenizer encode --special` on a model directory prints encode_for_model()'s ids.
void check_cli(const fs::path& dir) {
  SCOPED_TRACE("cli " + dir.string());
  const std::string text = "<s>Hello  world 12345 🤖\tcafé";
  const std::string command = std::string(UNSTUCK_BINARY) + " tokenizer encode --special --model '" + dir.string() +
                              "' --text '" + text + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  ASSERT_EQ(::pclose(pipe), 0) << output;
  std::string ids;
  for (const int32_t id : Tokenizer::load(dir).encode_for_model(text)) {
    if (!ids.empty()) ids += ' ';
    ids += std::to_string(id);
  }
  EXPECT_NE(output.find("ids:    " + ids + "\n"), std::string::npos) << output;
}

TEST_F(HfTokenizerParity, IdsAndDecodesEqualTheReferenceInEveryStyle) {
  for (const char* style : kStyles) check_style(*dir_, *reference_, style);
  for (const char* style : {"llama3", "spm_llama2"}) check_cli(*dir_ / style);
}

}  // namespace

namespace {

// A tiny hand-written tokenizer.json: "a", "b", "ab" with one merge, byte-level free.
json tiny_tokenizer() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 3, "content": "<eos>", "single_word": false, "lstrip": false,
                      "rstrip": false, "normalized": false, "special": true}],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "fuse_unk": false,
              "byte_fallback": false, "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}})");
}

class HfTokenizerFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("unstuck_hf_files_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Error message of loading `j` written as tokenizer.json ("" when it loads).
  std::string load_error(const json& j) {
    std::ofstream(dir_ / "tokenizer.json") << j.dump();
    try {
      Tokenizer::load(dir_);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(HfTokenizerFiles, UnsupportedComponentsAreRefusedByTypeAndPath) {
  json j = tiny_tokenizer();
  j["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]})");
  EXPECT_NE(load_error(j).find("normalizer.normalizers[1]: normalizer type 'Lowercase' is not supported"),
            std::string::npos)
      << load_error(j);
  j = tiny_tokenizer();
  j["pre_tokenizer"] = json::parse(R"({"type": "Whitespace"})");
  EXPECT_NE(load_error(j).find("pre_tokenizer: pre_tokenizer type 'Whitespace' is not supported"), std::string::npos);
  j = tiny_tokenizer();
  j["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [{"type": "WordPiece"}]})");
  EXPECT_NE(load_error(j).find("decoder.decoders[0]: decoder type 'WordPiece' is not supported"), std::string::npos);
  j = tiny_tokenizer();
  j["post_processor"] = json::parse(R"({"type": "RobertaProcessing"})");
  EXPECT_NE(load_error(j).find("post_processor type 'RobertaProcessing' is not supported"), std::string::npos);
  j = tiny_tokenizer();
  j["model"]["type"] = "WordPiece";
  EXPECT_NE(load_error(j).find("model.type 'WordPiece' is not supported"), std::string::npos);
  j = tiny_tokenizer();
  j["model"]["dropout"] = 0.1;
  EXPECT_NE(load_error(j).find("model.dropout: BPE dropout is not supported"), std::string::npos);
  j = tiny_tokenizer();
  j["model"]["merges"] = json::array({"a c"});
  EXPECT_NE(load_error(j).find("model.merges[0]: \"a c\" uses a token that is not in the vocabulary"),
            std::string::npos);
  j = tiny_tokenizer();
  j["padding"] = json::object();
  EXPECT_NE(load_error(j).find("'padding' is set"), std::string::npos);
  EXPECT_EQ(load_error(tiny_tokenizer()), "");
}

TEST_F(HfTokenizerFiles, EncodesDecodesAndRejectsBadInput) {
  std::ofstream(dir_ / "tokenizer.json") << tiny_tokenizer().dump();
  const Tokenizer tok = Tokenizer::load(dir_ / "tokenizer.json");
  EXPECT_EQ(tok.encode("abab<eos>a"), (std::vector<int32_t>{2, 2, 3, 0}));
  EXPECT_EQ(tok.decode({2, 3}, false), "ab <eos>");  // no decoder: tokens joined by spaces
  EXPECT_EQ(tok.decode({2, 3}), "ab");               // special tokens skipped by default
  EXPECT_EQ(tok.vocab_size(), 4);
  EXPECT_EQ(tok.piece_to_id("<eos>"), 3);
  EXPECT_EQ(tok.id_to_piece(2), "ab");
  ASSERT_EQ(tok.added_tokens().size(), 1u);
  EXPECT_TRUE(tok.added_tokens()[0].special);
  // Round trip through serialized() (what a checkpoint keeps).
  EXPECT_EQ(Tokenizer::from_serialized(tok.serialized(), "ckpt").encode("abab"), (std::vector<int32_t>{2, 2}));
  std::string error;
  try {
    tok.encode("a\xff");
  } catch (const UserError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("is not valid UTF-8 (byte 1)"), std::string::npos) << error;
  EXPECT_THROW(tok.decode({7}), UserError);
}

TEST_F(HfTokenizerFiles, MillionCharacterPreTokensNeitherFailNorGoQuadratic) {
  // Llama 3's split regex on a run of 1,000,000 spaces (one pre-token for `\s+(?!\S)`) and a
  // 1,000,000-letter word: PCRE2 must not run out of stack and BPE must stay O(n log n).
  json j = tiny_tokenizer();
  j["model"]["vocab"] = json::parse(R"({" ": 0, "a": 1, "  ": 2, "b": 3, "ab": 4})");
  j["model"]["merges"] = json::parse(R"([[" ", " "], ["a", "b"]])");
  j["pre_tokenizer"] = {{"type", "Split"},
                        {"pattern",
                         {{"Regex",
                           "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                           "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
                           "\\s+(?!\\S)|\\s+"}}},
                        {"behavior", "Isolated"},
                        {"invert", false}};
  std::ofstream(dir_ / "tokenizer.json") << j.dump();
  const Tokenizer tok = Tokenizer::load(dir_);
  std::string ab;
  for (int i = 0; i < 500000; ++i) ab += "ab";
  const std::vector<int32_t> ids = tok.encode(std::string(1000000, ' ') + "a" + ab);
  // Pre-tokens: 999,999 spaces (-> 499,999 "  " and one " "), then " a" + "ab" * 500,000 (-> " ",
  // "a" and 500,000 "ab").
  ASSERT_EQ(ids.size(), 499999u + 1u + 1u + 1u + 500000u);
  EXPECT_EQ(ids.front(), 2);
  EXPECT_EQ(ids.back(), 4);
}

TEST_F(HfTokenizerFiles, DirectoryPrefersTokenizerJsonAndReadsTheConfig) {
  std::ofstream(dir_ / "tokenizer.json") << tiny_tokenizer().dump();
  std::ofstream(dir_ / "tokenizer.model") << "not read: tokenizer.json wins";
  std::ofstream(dir_ / "tokenizer_config.json") << R"({"eos_token": {"content": "<eos>"}, "pad_token": "a"})";
  const Tokenizer tok = Tokenizer::load(dir_);
  EXPECT_EQ(tok.format(), TokenizerFormat::tokenizer_json);
  EXPECT_EQ(Tokenizer::file_in_directory(dir_), dir_ / "tokenizer.json");
  EXPECT_EQ(tok.eos_id(), 3);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_FALSE(tok.adds_bos());
  std::ofstream(dir_ / "tokenizer_config.json") << R"({"bos_token": "<s>"})";
  std::string error;
  try {
    Tokenizer::load(dir_);
  } catch (const UserError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("bos_token '<s>' is not in the vocabulary"), std::string::npos) << error;
  fs::remove(dir_ / "tokenizer.json");
  fs::remove(dir_ / "tokenizer.model");
  error.clear();
  try {
    Tokenizer::load(dir_);
  } catch (const UserError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("has neither tokenizer.json nor tokenizer.model"), std::string::npos) << error;
}

}  // namespace
