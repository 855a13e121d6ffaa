// Deterministic task generators. Each is a pure function of (options, seed, n, split): the same
// arguments give the same records on every platform (own RNG, no std distributions). A problem
// belongs to the train or the test split by a seed-independent hash of its canonical form, so the
// splits are disjoint for any seeds; records within one call are distinct problems.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "unstuck/data/data_config.h"
#include "unstuck/data/record.h"

namespace unstuck::data {

enum class Split { train, test };

inline constexpr std::array<std::pair<Split, const char*>, 2> kSplitNames{{
    {Split::train, "train"},
    {Split::test, "test"},
}};
constexpr const auto& enum_names(Split) { return kSplitNames; }

// The split a problem belongs to: test when the hash of `canonical_key` falls below
// test_fraction. The hash is fixed (FNV-1a), independent of any seed.
Split split_of(const std::string& canonical_key, double test_fraction);

// The canonical form of a record's problem (what split_of() hashes): "12+35" for arithmetic,
// "3,5,7->22" (numbers sorted) for countdown. Throws UserError for a record of another task.
std::string canonical_key(const TaskRecord& record);

// n distinct arithmetic problems of `split`, e.g. {"task": "arithmetic", "prompt": "12+35=",
// "answer": "47", "a": 12, "b": 35, "op": "add"}. Throws UserError when the options' problem
// space holds fewer than n problems of that split (naming the options to widen).
std::vector<TaskRecord> generate_arithmetic(const ArithmeticOptions& options, double test_fraction, uint64_t seed,
                                            int64_t n, Split split);

// n distinct countdown problems of `split`, e.g. {"task": "countdown", "prompt": "Use 3 5 7 to
// make 22:", "answer": "3*5+7", "numbers": [3, 5, 7], "target": 22}. Solvable by construction:
// the target is the value of a random expression over all the numbers (integer intermediate
// results, no negatives, exact divisions), and that expression is kept as the answer.
std::vector<TaskRecord> generate_countdown(const CountdownOptions& options, double test_fraction, uint64_t seed,
                                           int64_t n, Split split);

// Dispatches on config.task (after validate(config)).
std::vector<TaskRecord> generate_records(const DataConfig& config, uint64_t seed, int64_t n, Split split);

}  // namespace unstuck::data
