// Reward shaping of a completion by its length, before the advantages: DAPO's overlong handling
// (Yu et al. 2025, "DAPO", section 3.4). Pure functions, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace unstuck::algo {

// What a completion that reached rollout.max_new_tokens without a stop token gets: nothing
// (none), no part in the loss (filter: DAPO's overlong filtering; its reward still counts in its
// group's baseline), or a length penalty added to every reward (soft_penalty: DAPO's soft
// overlong punishment, overlong_penalty()).
enum class Overlong { none, filter, soft_penalty };
inline constexpr std::array<std::pair<Overlong, const char*>, 3> kOverlongNames{{
    {Overlong::none, "none"},
    {Overlong::filter, "filter"},
    {Overlong::soft_penalty, "soft_penalty"},
}};
constexpr const auto& enum_names(Overlong) { return kOverlongNames; }

// DAPO's soft overlong punishment of a completion of `length` tokens, with L_max = `max_len` and
// L_cache = `buffer` (1 <= buffer <= max_len): 0 up to L_max - L_cache, then falling linearly,
// ((L_max - L_cache) - length) / L_cache, to -1 at L_max; -1 beyond.
// Example (L_max 16, L_cache 4): 12 tokens -> 0, 14 -> -0.5, 16 -> -1.
double overlong_penalty(int64_t length, int64_t max_len, int64_t buffer);

}  // namespace unstuck::algo
