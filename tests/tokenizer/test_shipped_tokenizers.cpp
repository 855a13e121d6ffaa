// The tokenizers shipped in data/<task>/ cover their tasks: every prompt and SFT completion of the
// shipped splits encodes without <unk> and decodes back to the same text.
#include <gtest/gtest.h>

#include <string>

#include "unstuck/data/data_config.h"
#include "unstuck/data/record.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::tokenizer {
namespace {

void check_task(const std::string& task) {
  const std::string dir = std::string(UNSTUCK_SOURCE_DIR) + "/data/" + task + "/";
  const Tokenizer tok = Tokenizer::load(dir + "tokenizer.model");
  data::DataConfig cfg;
  for (const char* split : {"train.jsonl", "test.jsonl"}) {
    for (const data::TaskRecord& r : data::read_jsonl(dir + split)) {
      const std::string text = data::format_prompt(r, cfg) + data::format_completion(r, cfg);
      const std::vector<int32_t> ids = tok.encode(text);
      for (int32_t id : ids) ASSERT_NE(id, tok.unk_id()) << task << ": " << text;
      ASSERT_EQ(tok.decode(ids), text);
    }
  }
  EXPECT_EQ(tok.encode("<answer>").size(), 1u);
}

TEST(ShippedTokenizers, ArithmeticCoversItsData) { check_task("arithmetic"); }
TEST(ShippedTokenizers, CountdownCoversItsData) { check_task("countdown"); }

}  // namespace
}  // namespace unstuck::tokenizer
