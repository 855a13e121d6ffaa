// Tokenizer tests: tokenizers trained from a small arithmetic corpus round-trip text exactly, keep
// the special-id convention, encode user symbols as one piece, and every mistake gets an error
// naming what to fix. Also runs `unstuck tokenizer train/encode` end to end.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using unstuck::UserError;
using unstuck::tokenizer::ModelType;
using unstuck::tokenizer::Tokenizer;
using unstuck::tokenizer::train_tokenizer;
using unstuck::tokenizer::TrainOptions;

namespace {

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("unstuck_tok_" + std::to_string(::getpid()) + "_" + info->name());
    fs::create_directories(dir_);
    corpus_ = (dir_ / "corpus.txt").string();
    std::ofstream out(corpus_);
    out << "Question: two leading spaces, inside and trailing. Answer:\n";
    for (int a = 0; a < 40; ++a) {
      for (int b = 0; b < 40; b += 7) {
        out << a << "+" << b << "=<answer>" << a + b << "</answer>\n";
        out << "What is " << a << " * " << b << "? <answer>" << a * b << "</answer>\n";
        out << a + b << "-" << b << "=<answer>" << a << "</answer>\n";
      }
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainOptions options(ModelType type, int64_t vocab_size) const {
    TrainOptions opts;
    opts.input = corpus_;
    opts.output = (dir_ / "tok.model").string();
    opts.model_type = type;
    opts.vocab_size = vocab_size;
    opts.user_defined_symbols = {"<answer>", "</answer>"};
    return opts;
  }

  std::vector<std::string> pieces(const Tokenizer& tok, const std::string& text) const {
    std::vector<std::string> out;
    for (int32_t id : tok.encode(text)) out.push_back(tok.id_to_piece(id));
    return out;
  }

  fs::path dir_;
  std::string corpus_;
};

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "<no UserError>";
}

// bpe/unigram vocabulary for the test corpus (unigram accepts at most 50 on it).
constexpr int64_t kSubwordVocab = 48;

const std::vector<std::string> kRoundTripTexts = {
    "12+35=<answer>47</answer>",
    "What is 7 * 8? <answer>56</answer>",
    "  two leading spaces, two  inside and trailing  ",
    "Question: 3+4\nAnswer:\t<answer>7</answer>\n",
    "",
};

}  // namespace

TEST_F(TokenizerTest, CharModelRoundTripsArithmeticExactly) {
  const Tokenizer tok = Tokenizer::load(train_tokenizer(options(ModelType::character, 0)));
  for (const std::string& text : {std::string("12+35=<answer>47</answer>"), std::string("0-9=<answer>-9</answer>"),
                                  std::string("39+35=<answer>74</answer>")}) {
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
  const std::vector<std::string> expected = {"1", "2", "+", "3", "5", "=", "<answer>", "4", "7", "</answer>"};
  EXPECT_EQ(pieces(tok, "12+35=<answer>47</answer>"), expected);
}

TEST_F(TokenizerTest, EveryModelTypeRoundTripsTextOfCorpusCharacters) {
  for (const auto& [type, vocab] :
       {std::pair{ModelType::character, int64_t{0}}, std::pair{ModelType::bpe, kSubwordVocab},
        std::pair{ModelType::unigram, kSubwordVocab}}) {
    const Tokenizer tok = Tokenizer::load(train_tokenizer(options(type, vocab)));
    for (const std::string& text : kRoundTripTexts) {
      EXPECT_EQ(tok.decode(tok.encode(text)), text) << unstuck::config::enum_name(type);
    }
  }
}

TEST_F(TokenizerTest, BpeAndUnigramSplitDigits) {
  for (ModelType type : {ModelType::bpe, ModelType::unigram}) {
    const Tokenizer tok = Tokenizer::load(train_tokenizer(options(type, kSubwordVocab)));
    EXPECT_EQ(tok.vocab_size(), kSubwordVocab);
    const std::vector<std::string> expected = {"1", "2", "3", "4", "5"};
    EXPECT_EQ(pieces(tok, "12345"), expected) << unstuck::config::enum_name(type);
  }
}

TEST_F(TokenizerTest, SpecialIdsFollowTheConvention) {
  const Tokenizer tok = Tokenizer::load(train_tokenizer(options(ModelType::character, 0)));
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.unk_id(), 1);
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.eos_id(), 3);
  EXPECT_TRUE(tok.has_pad_piece());
  EXPECT_EQ(tok.id_to_piece(0), "<pad>");
  EXPECT_EQ(tok.id_to_piece(1), "<unk>");
  EXPECT_EQ(tok.id_to_piece(2), "<s>");
  EXPECT_EQ(tok.id_to_piece(3), "</s>");
  // User symbols come next in the order given, then the newline and tab pieces.
  EXPECT_EQ(tok.piece_to_id("<answer>"), 4);
  EXPECT_EQ(tok.piece_to_id("</answer>"), 5);
  EXPECT_EQ(tok.piece_to_id("\n"), 6);
  EXPECT_EQ(tok.piece_to_id("\t"), 7);
  EXPECT_EQ(tok.piece_to_id("<unk>"), 1);
  EXPECT_EQ(tok.piece_to_id("no such piece"), -1);

  const std::vector<int32_t> plain = tok.encode("1+1");
  const std::vector<int32_t> framed = tok.encode("1+1", true, true);
  ASSERT_EQ(framed.size(), plain.size() + 2);
  EXPECT_EQ(framed.front(), 2);
  EXPECT_EQ(framed.back(), 3);
  // Control ids decode to nothing.
  std::vector<int32_t> padded = framed;
  padded.push_back(tok.pad_id());
  EXPECT_EQ(tok.decode(padded), "1+1");
}

TEST_F(TokenizerTest, UserSymbolsEncodeAsOnePiece) {
  for (const auto& [type, vocab] :
       {std::pair{ModelType::character, int64_t{0}}, std::pair{ModelType::bpe, kSubwordVocab},
        std::pair{ModelType::unigram, kSubwordVocab}}) {
    const Tokenizer tok = Tokenizer::load(train_tokenizer(options(type, vocab)));
    EXPECT_EQ(tok.encode("<answer>"), std::vector<int32_t>{4});
    EXPECT_EQ(tok.encode("</answer>"), std::vector<int32_t>{5});
    const std::vector<int32_t> ids = tok.encode("x<answer>1</answer>");
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids[ids.size() - 3], 4);
    EXPECT_EQ(ids.back(), 5);
  }
}

TEST_F(TokenizerTest, UnseenCharactersBecomeUnk) {
  const Tokenizer tok = Tokenizer::load(train_tokenizer(options(ModelType::character, 0)));
  EXPECT_EQ(tok.encode("~"), std::vector<int32_t>{1});
}

TEST_F(TokenizerTest, SerializedModelLoadsBack) {
  const Tokenizer tok = Tokenizer::load(train_tokenizer(options(ModelType::bpe, kSubwordVocab)));
  const Tokenizer copy = Tokenizer::from_serialized(tok.serialized(), "checkpoint");
  EXPECT_EQ(copy.vocab_size(), tok.vocab_size());
  EXPECT_EQ(copy.encode(kRoundTripTexts[0]), tok.encode(kRoundTripTexts[0]));
  EXPECT_NE(error_of([] {
              Tokenizer::from_serialized("junk", "ckpt/tokenizer");
            }).find("tokenizer model 'ckpt/tokenizer' is not a valid SentencePiece model"),
            std::string::npos);
}

TEST_F(TokenizerTest, CharVocabSizeIsAnUpperBound) {
  const int32_t needed = Tokenizer::load(train_tokenizer(options(ModelType::character, 0))).vocab_size();
  EXPECT_EQ(Tokenizer::load(train_tokenizer(options(ModelType::character, needed + 10))).vocab_size(), needed);
  const std::string error = error_of([&] { train_tokenizer(options(ModelType::character, needed - 1)); });
  EXPECT_NE(error.find("needs " + std::to_string(needed) + " pieces"), std::string::npos) << error;
  EXPECT_NE(error.find("raise --vocab-size to at least " + std::to_string(needed)), std::string::npos) << error;
}

TEST_F(TokenizerTest, FailedTrainingKeepsTheExistingModel) {
  const fs::path model = train_tokenizer(options(ModelType::character, 0));
  const int32_t size = Tokenizer::load(model).vocab_size();
  EXPECT_THROW(train_tokenizer(options(ModelType::character, 5)), UserError);
  EXPECT_THROW(train_tokenizer(options(ModelType::unigram, 100000)), UserError);
  EXPECT_EQ(Tokenizer::load(model).vocab_size(), size);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << entry.path();
  }
}

TEST_F(TokenizerTest, LoadErrorsNameTheFile) {
  const std::string missing = (dir_ / "missing.model").string();
  std::string error = error_of([&] { Tokenizer::load(missing); });
  EXPECT_NE(error.find("tokenizer model '" + missing + "' not found"), std::string::npos) << error;

  const std::string corrupt = (dir_ / "corrupt.model").string();
  std::ofstream(corrupt) << "this is not a protobuf";
  error = error_of([&] { Tokenizer::load(corrupt); });
  EXPECT_NE(error.find("tokenizer model '" + corrupt + "' is not a valid SentencePiece model"), std::string::npos)
      << error;
}

TEST_F(TokenizerTest, TrainErrorsNameTheOption) {
  TrainOptions opts = options(ModelType::character, 0);
  opts.input = (dir_ / "nope.txt").string();
  EXPECT_NE(error_of([&] { train_tokenizer(opts); }).find("training corpus '" + opts.input + "' not found (--input)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              train_tokenizer(options(ModelType::bpe, 0));
            }).find("a bpe tokenizer needs a vocab_size > 0 (--vocab-size)"),
            std::string::npos);
  opts = options(ModelType::character, 0);
  opts.user_defined_symbols = {"<a>", "<a>"};
  EXPECT_NE(error_of([&] { train_tokenizer(opts); }).find("'<a>' is given twice"), std::string::npos);
  const std::string too_big = error_of([&] { train_tokenizer(options(ModelType::unigram, 100000)); });
  EXPECT_NE(too_big.find("SentencePiece could not train a unigram tokenizer on '" + corpus_ + "'"), std::string::npos)
      << too_big;
}

TEST_F(TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
  const Tokenizer tok = Tokenizer::load(train_tokenizer(options(ModelType::character, 0)));
  const std::string error = error_of([&] { tok.decode({4, tok.vocab_size()}); });
  EXPECT_NE(error.find("token id " + std::to_string(tok.vocab_size()) + " is outside the vocabulary"),
            std::string::npos)
      << error;
  EXPECT_THROW(tok.id_to_piece(-1), UserError);
}

TEST_F(TokenizerTest, CliTrainsAndEncodes) {
  const std::string model = (dir_ / "cli" / "tok.model").string();
  const std::string train = std::string(UNSTUCK_BINARY) + " tokenizer train --input " + corpus_ +
                            " --model-type char --out " + model + " --user-symbols '<answer>,</answer>' 2>&1";
  std::string output;
  auto run = [&output](const std::string& command) {
    output.clear();
    FILE* pipe = ::popen(command.c_str(), "r");
    char buffer[512];
    while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
    return ::pclose(pipe);
  };
  ASSERT_EQ(run(train), 0) << output;
  EXPECT_NE(output.find("pad 0, unk 1, bos 2, eos 3"), std::string::npos) << output;
  EXPECT_TRUE(fs::exists(dir_ / "cli" / "tok.vocab"));

  ASSERT_EQ(
      run(std::string(UNSTUCK_BINARY) + " tokenizer encode --model " + model + " --text '1+2=<answer>3</answer>' 2>&1"),
      0)
      << output;
  const Tokenizer tok = Tokenizer::load(model);
  std::string ids;
  for (int32_t id : tok.encode("1+2=<answer>3</answer>")) {
    ids += (ids.empty() ? "" : " ") + std::to_string(id);
  }
  EXPECT_NE(output.find("ids:    " + ids + "\n"), std::string::npos) << output;
  EXPECT_NE(output.find("pieces: \"1\" \"+\" \"2\" \"=\" \"<answer>\" \"3\" \"</answer>\""), std::string::npos)
      << output;

  EXPECT_NE(run(std::string(UNSTUCK_BINARY) + " tokenizer encode --model " + (dir_ / "missing.model").string() +
                " --text x 2>&1"),
            0);
  EXPECT_NE(output.find("not found"), std::string::npos) << output;
}
