// `unstuck bench tokenizer`: MB/s of Tokenizer::encode on one thread against the `tokenizers`
// library (scripts/bench_tokenizer.py) on the same lines, best of N passes each; checks that both
// produced the same ids (token count and checksum) so the ratio compares equal work.
#include "bench/bench_tokenizer.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/tokenizer/tokenizer.h"

namespace unstuck::bench {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

// scripts/bench_tokenizer.py, looked up from the working directory, then next to the binary's
// build directory (build/unstuck -> scripts/).
fs::path find_script() {
  std::vector<fs::path> candidates{fs::current_path() / "scripts/bench_tokenizer.py"};
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path().parent_path() / "scripts/bench_tokenizer.py");
  for (const fs::path& p : candidates) {
    if (fs::is_regular_file(p)) return p;
  }
  throw UserError("bench tokenizer: scripts/bench_tokenizer.py not found; run from the repository root");
}

std::string python_binary(const std::string& option) {
  if (!option.empty()) return option;
  if (const char* env = std::getenv("UNSTUCK_PYTHON")) return env;
  if (fs::exists(".venv/bin/python")) return ".venv/bin/python";
  return "python3";
}

// Runs `command` and returns its standard output; throws naming the command when it fails.
std::string run(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw UserError("bench tokenizer: cannot run " + command);
  std::string output;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe.get())) > 0) output.append(buffer.data(), n);
  if (pclose(pipe.release()) != 0) {
    throw UserError("bench tokenizer: `" + command +
                    "` failed (is the `tokenizers` Python package installed? see requirements.txt)");
  }
  return output;
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

std::vector<std::string> read_lines(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("bench tokenizer: cannot read '" + path.string() + "'");
  std::stringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  lines.push_back(text.substr(start));
  return lines;
}

}  // namespace

void run_tokenizer_bench(const TokenizerBenchOptions& opt, std::ostream& out) {
  const std::string python = python_binary(opt.python);
  const fs::path script = find_script();
  const std::string py = python + " " + quoted(script) + " ";
  const fs::path work = fs::temp_directory_path() / ("unstuck_bench_tok_" + std::to_string(::getpid()));
  fs::create_directories(work);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{work};

  fs::path tokenizer_json = opt.tokenizer;
  if (opt.tokenizer.empty()) {
    run(py + "train llama3 " + quoted(work / "llama3"));
    tokenizer_json = work / "llama3/tokenizer.json";
  } else if (fs::is_directory(opt.tokenizer)) {
    tokenizer_json = fs::path(opt.tokenizer) / "tokenizer.json";
  }
  fs::path text = opt.text;
  if (text.empty()) {
    text = work / "corpus.txt";
    run(py + "corpus " + quoted(text) + " " + std::to_string(opt.megabytes));
  }
  const Json baseline =
      Json::parse(run(py + "time " + quoted(tokenizer_json) + " " + quoted(text) + " " + std::to_string(opt.repeats)));

  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::load(tokenizer_json);
  const std::vector<std::string> lines = read_lines(text);
  double best = 1e30;
  int64_t tokens = 0;
  uint64_t checksum = 0;
  for (int r = 0; r < opt.repeats; ++r) {
    tokens = 0;
    checksum = 0;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<int32_t>> all;
    all.reserve(lines.size());
    for (const std::string& line : lines) all.push_back(tok.encode(line));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    constexpr uint64_t kMod = (uint64_t{1} << 61) - 1;  // same formula as bench_tokenizer.py
    for (const auto& ids : all) {
      tokens += static_cast<int64_t>(ids.size());
      for (const int32_t id : ids) {
        checksum = static_cast<uint64_t>((static_cast<unsigned __int128>(checksum) * 1000003 + id + 1) % kMod);
      }
    }
  }
  const double bytes = baseline["bytes"].get<double>();
  const double ours = bytes / best / 1e6;
  const double theirs = bytes / baseline["seconds"].get<double>() / 1e6;
  const bool same = tokens == baseline["tokens"].get<int64_t>() && checksum == baseline["checksum"].get<uint64_t>();
  Json result;
  result["tokenizer"] = opt.tokenizer.empty() ? "llama3-style (trained in this run)" : opt.tokenizer;
  result["bytes"] = bytes;
  result["lines"] = lines.size();
  result["tokens"] = tokens;
  result["same_ids"] = same;
  result["unstuck_mb_per_s"] = ours;
  result["tokenizers_mb_per_s"] = theirs;
  result["ratio"] = ours / theirs;
  result["threads"] = 1;
  if (opt.json) {
    out << result.dump() << "\n";
  } else {
    out << "unstuck bench tokenizer: " << result["tokenizer"].get<std::string>() << ", " << std::fixed
        << std::setprecision(2) << bytes / 1e6 << " MB in " << lines.size() << " lines, one thread, best of "
        << opt.repeats << "\n\n"
        << "unstuck     " << std::setw(8) << ours << " MB/s\n"
        << "tokenizers  " << std::setw(8) << theirs << " MB/s\n"
        << "ratio       " << std::setw(8) << ours / theirs << "  (target >= 1)\n"
        << "same ids    " << (same ? "yes" : "NO") << " (" << tokens << " tokens)\n";
  }
  if (!same) throw std::runtime_error("bench tokenizer: ids differ from the tokenizers library");
}

}  // namespace unstuck::bench
