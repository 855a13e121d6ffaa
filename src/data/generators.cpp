// The arithmetic and countdown generators. Randomness is a splitmix64 stream keyed by (task, seed,
// split) with our own uniform draw, so output is identical on every platform and standard library.
// Split membership is a fixed hash of the canonical problem; duplicates within a call are skipped.
#include "unstuck/data/generators.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/common/value_names.h"

namespace unstuck::data {
namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

// splitmix64: a tiny counter-based stream; the key separates tasks, seeds and splits.
class Rng {
 public:
  Rng(const char* task, uint64_t seed, Split split)
      : state_(mix64(fnv1a(task) ^ mix64(seed + 0x9e3779b97f4a7c15ULL)) +
               (split == Split::test ? 0x632be59bd9b4e019ULL : 0)) {}

  uint64_t next() {
    state_ += 0x9e3779b97f4a7c15ULL;
    return mix64(state_);
  }

  // Uniform integer in [lo, hi] by rejection (no modulo bias, no std::uniform_int_distribution,
  // whose output differs between standard libraries).
  int64_t uniform(int64_t lo, int64_t hi) {
    const uint64_t range = static_cast<uint64_t>(hi - lo) + 1;
    if (range == 0) return static_cast<int64_t>(next());  // the full 64-bit range
    const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t x = next();
    while (x >= limit) x = next();
    return lo + static_cast<int64_t>(x % range);
  }

 private:
  uint64_t state_;
};

int64_t pow10(int digits) {
  int64_t p = 1;
  for (int i = 0; i < digits; ++i) p *= 10;
  return p;
}

// Draws until `n` distinct problems of `split` are found; `draw` returns a record and its key.
template <class Draw>
std::vector<TaskRecord> collect(int64_t n, Split split, double test_fraction, const char* task,
                                const std::string& widen_hint, Draw draw) {
  if (n < 0) throw UserError("the number of records must be >= 0, got " + std::to_string(n));
  std::vector<TaskRecord> records;
  records.reserve(static_cast<size_t>(n));
  std::unordered_set<std::string> seen;
  // Generous: the test split is ~test_fraction of the draws and duplicates get rarer as the space
  // grows; running out means the space is (nearly) exhausted.
  const int64_t max_draws = 10000 + 200 * n;
  for (int64_t draws = 0; static_cast<int64_t>(records.size()) < n; ++draws) {
    if (draws >= max_draws) {
      throw UserError(std::string("could only generate ") + std::to_string(records.size()) + " distinct " + task +
                      " problems for the " + enum_name(split) + " split, " + std::to_string(n) + " requested; " +
                      widen_hint);
    }
    std::string key;
    TaskRecord record = draw(key);
    if (split_of(key, test_fraction) != split) continue;
    if (!seen.insert(key).second) continue;
    records.push_back(std::move(record));
  }
  return records;
}

// ---- countdown -------------------------------------------------------------------------------

// A partial expression while the generator combines numbers: its value and text, and the
// precedence of its outermost operator (3: a bare number, 2: * or /, 1: + or -).
struct Partial {
  int64_t value;
  std::string text;
  int precedence;
};

Partial combine(const Partial& a, char op, const Partial& b) {
  const int precedence = (op == '+' || op == '-') ? 1 : 2;
  // Parenthesize a side whose operator binds more loosely; on the right also one of equal
  // precedence under - or / (a-(b+c) and a/(b*c) need them; a+(b-c) and a*(b/c) do not).
  const bool wrap_left = a.precedence < precedence;
  const bool wrap_right = b.precedence < precedence || (b.precedence == precedence && (op == '-' || op == '/'));
  std::string text = wrap_left ? "(" + a.text + ")" : a.text;
  text += op;
  text += wrap_right ? "(" + b.text + ")" : b.text;
  int64_t value = 0;
  switch (op) {
    case '+':
      value = a.value + b.value;
      break;
    case '-':
      value = a.value - b.value;
      break;
    case '*':
      value = a.value * b.value;
      break;
    default:
      value = a.value / b.value;
      break;
  }
  return {value, std::move(text), precedence};
}

// Combines the numbers in random order with random operators, keeping intermediate results
// non-negative integers (subtraction takes the larger first, division only when exact), so the
// returned expression uses every number once and evaluates to its value exactly.
Partial random_expression(const std::vector<int64_t>& numbers, Rng& rng) {
  std::vector<Partial> items;
  for (const int64_t x : numbers) items.push_back({x, std::to_string(x), 3});
  while (items.size() > 1) {
    const auto i = static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(items.size()) - 1));
    auto j = static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(items.size()) - 2));
    if (j >= i) ++j;
    Partial a = items[i];
    Partial b = items[j];
    char op = "+-*/"[rng.uniform(0, 3)];
    if (op == '-' && a.value < b.value) std::swap(a, b);
    if (op == '/') {
      if (a.value < b.value) std::swap(a, b);
      if (b.value == 0 || a.value % b.value != 0) op = '*';
    }
    Partial merged = combine(a, op, b);
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(std::max(i, j)));
    items.erase(items.begin() + static_cast<std::ptrdiff_t>(std::min(i, j)));
    items.push_back(std::move(merged));
  }
  return items.front();
}

std::string countdown_key(std::vector<int64_t> numbers, int64_t target) {
  std::sort(numbers.begin(), numbers.end());
  std::string key;
  for (const int64_t x : numbers) key += (key.empty() ? "" : ",") + std::to_string(x);
  return key + "->" + std::to_string(target);
}

std::string arithmetic_key(int64_t a, int64_t b, const std::string& op) {
  // Sorted operands: 12+35 and 35+12 are one problem, so they never land in different splits.
  return std::to_string(std::min(a, b)) + (op == "add" ? "+" : "*") + std::to_string(std::max(a, b));
}

}  // namespace

Split split_of(const std::string& canonical_key, double test_fraction) {
  const double u = static_cast<double>(mix64(fnv1a(canonical_key)) >> 11) * 0x1.0p-53;
  return u < test_fraction ? Split::test : Split::train;
}

std::string canonical_key(const TaskRecord& record) {
  try {
    if (record.task == "arithmetic") {
      return arithmetic_key(record.fields.at("a").get<int64_t>(), record.fields.at("b").get<int64_t>(),
                            record.fields.at("op").get<std::string>());
    }
    if (record.task == "countdown") {
      return countdown_key(record.fields.at("numbers").get<std::vector<int64_t>>(),
                           record.fields.at("target").get<int64_t>());
    }
  } catch (const nlohmann::json::exception&) {
    throw UserError("record of task '" + record.task +
                    "' lacks its fields (arithmetic: a, b, op; countdown: numbers, target)");
  }
  throw UserError("no canonical form for task '" + record.task + "' (known: arithmetic, countdown)");
}

std::vector<TaskRecord> generate_arithmetic(const ArithmeticOptions& options, double test_fraction, uint64_t seed,
                                            int64_t n, Split split) {
  DataConfig check;
  check.arithmetic = options;
  check.test_fraction = test_fraction;
  validate(check);
  Rng rng("arithmetic", seed, split);
  auto operand = [&] {
    const int digits = static_cast<int>(rng.uniform(options.min_digits, options.max_digits));
    const int64_t lo = digits == 1 ? 0 : pow10(digits - 1);
    return rng.uniform(lo, pow10(digits) - 1);
  };
  auto draw = [&](std::string& key) {
    const std::string& op =
        options.ops[static_cast<size_t>(rng.uniform(0, static_cast<int64_t>(options.ops.size()) - 1))];
    const int64_t a = operand();
    const int64_t b = operand();
    key = arithmetic_key(a, b, op);
    TaskRecord record;
    record.task = "arithmetic";
    record.prompt = std::to_string(a) + (op == "add" ? "+" : "*") + std::to_string(b) + "=";
    record.answer = std::to_string(op == "add" ? a + b : a * b);
    record.fields = {{"a", a}, {"b", b}, {"op", op}};
    return record;
  };
  return collect(n, split, test_fraction, "arithmetic", "widen data.arithmetic.min_digits..max_digits or add ops",
                 draw);
}

std::vector<TaskRecord> generate_countdown(const CountdownOptions& options, double test_fraction, uint64_t seed,
                                           int64_t n, Split split) {
  DataConfig check;
  check.countdown = options;
  check.test_fraction = test_fraction;
  validate(check);
  Rng rng("countdown", seed, split);
  auto draw = [&](std::string& key) {
    std::vector<int64_t> numbers(static_cast<size_t>(options.count));
    Partial solution;
    // Redraw until the expression's value is a target in range; a wide target range takes a few
    // tries, a narrow one more (each try is cheap).
    for (int tries = 0;; ++tries) {
      for (int64_t& x : numbers) x = rng.uniform(options.min_number, options.max_number);
      solution = random_expression(numbers, rng);
      if (solution.value >= options.min_target && solution.value <= options.max_target) break;
      if (tries >= 100000) {
        throw UserError("no countdown target in data.countdown.min_target..max_target [" +
                        std::to_string(options.min_target) + ", " + std::to_string(options.max_target) +
                        "] is reachable from numbers in [" + std::to_string(options.min_number) + ", " +
                        std::to_string(options.max_number) + "]; widen the target range");
      }
    }
    key = countdown_key(numbers, solution.value);
    TaskRecord record;
    record.task = "countdown";
    record.prompt = "Use";
    for (const int64_t x : numbers) record.prompt += " " + std::to_string(x);
    record.prompt += " to make " + std::to_string(solution.value) + ":";
    record.answer = solution.text;
    record.fields = {{"numbers", numbers}, {"target", solution.value}};
    return record;
  };
  return collect(n, split, test_fraction, "countdown", "widen data.countdown number or target ranges, or raise count",
                 draw);
}

std::vector<TaskRecord> generate_records(const DataConfig& config, uint64_t seed, int64_t n, Split split) {
  validate(config);
  switch (config.task) {
    case TaskKind::arithmetic:
      return generate_arithmetic(config.arithmetic, config.test_fraction, seed, n, split);
    case TaskKind::countdown:
      return generate_countdown(config.countdown, config.test_fraction, seed, n, split);
    case TaskKind::math:
    case TaskKind::code:
      break;
  }
  throw UserError(std::string("data.task ") + enum_name(config.task) +
                  " has no generator (its datasets are read from JSONL: data.train_path)");
}

}  // namespace unstuck::data
