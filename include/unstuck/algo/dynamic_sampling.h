// Dynamic sampling (Yu et al. 2025, "DAPO", section 3.2): groups whose completions all scored the
// same carry no group-relative signal, so they are dropped and more prompts are rolled out until
// the batch holds enough informative groups. Pure functions, no I/O; the trainer draws the rounds.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

namespace unstuck::algo {

// Which groups a rollout batch keeps: all (none), or those whose rewards are not all equal
// (zero_variance: DAPO's filter, verl's filter_groups on the score).
enum class GroupFilter { none, zero_variance };
inline constexpr std::array<std::pair<GroupFilter, const char*>, 2> kGroupFilterNames{{
    {GroupFilter::none, "none"},
    {GroupFilter::zero_variance, "zero_variance"},
}};
constexpr const auto& enum_names(GroupFilter) { return kGroupFilterNames; }

// One flag per group of `group_size` consecutive rewards: true when they are not all equal (NaN
// rewards, of completions no scorer applied to, left out).
// Example: {1, 0, 1, 1 | 0.5, 0.5, 0.5, 0.5}, G = 4 -> {true, false}; {1, NaN, 1, 1} -> false.
// Throws std::invalid_argument for a group size < 2 or a count that does not split into groups.
std::vector<bool> informative_groups(const std::vector<float>& rewards, int64_t group_size);

struct GroupSelection {
  std::vector<int64_t> groups;  // candidate indices, in batch order: `wanted` of them, or all when fewer
  int64_t filled = 0;           // of which uninformative, taken because too few were informative
};

// The batch of `wanted` groups from candidates 0, 1, ... (in the order they were sampled, over all
// rounds) with their `informative` flags: the first `wanted` informative ones; when there are
// fewer, the first uninformative ones fill the rest, after them.
// Example: flags {F, T, F, T, T}, wanted 2 -> {1, 3}, filled 0; wanted 4 -> {1, 3, 4, 0}, filled 1.
GroupSelection select_groups(const std::vector<bool>& informative, int64_t wanted);

}  // namespace unstuck::algo
