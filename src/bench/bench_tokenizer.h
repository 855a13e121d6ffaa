// Private: `unstuck bench tokenizer`, encode throughput (MB/s, one thread) of our tokenizer.json
// pipeline against the Hugging Face `tokenizers` library on the same text, measured in the same run.
#pragma once

#include <ostream>
#include <string>

namespace unstuck::bench {

struct TokenizerBenchOptions {
  bool json = false;       // one JSON object instead of the table
  std::string tokenizer;   // model directory or tokenizer.json; empty: train a Llama-3-style one
  std::string text;        // UTF-8 text, encoded line by line; empty: a generated corpus
  double megabytes = 4.0;  // size of the generated corpus
  int repeats = 3;         // timed passes per side (best kept; the first also warms caches)
  std::string python;      // interpreter with `tokenizers`; empty: $UNSTUCK_PYTHON, .venv, python3
};

void run_tokenizer_bench(const TokenizerBenchOptions& options, std::ostream& out);

}  // namespace unstuck::bench
