// The order in which training records are visited: a shuffled permutation walked one record at a
// time and reshuffled at the end of each epoch, from the run's data stream. Its state (RNG, current
// permutation, cursor) round-trips through checkpoints, so a resumed run sees the same records.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "unstuck/common/error.h"

namespace unstuck::train {

class RecordOrder {
 public:
  RecordOrder(std::size_t records, uint64_t seed) : rng_(seed), order_(records) {
    std::iota(order_.begin(), order_.end(), std::size_t(0));
    std::shuffle(order_.begin(), order_.end(), rng_);
  }

  // Index of the next record (reshuffling first when the epoch is complete).
  std::size_t next() {
    if (cursor_ == order_.size()) {
      std::shuffle(order_.begin(), order_.end(), rng_);
      cursor_ = 0;
    }
    return order_[cursor_++];
  }

  std::string rng_state() const {
    std::ostringstream out;
    out << rng_;
    return out.str();
  }
  std::vector<int64_t> permutation() const { return {order_.begin(), order_.end()}; }
  int64_t cursor() const { return int64_t(cursor_); }

  // Restores a saved state; `source` names the checkpoint when it does not fit these records.
  void restore(const std::string& rng_state, const std::vector<int64_t>& permutation, int64_t cursor,
               const std::string& source) {
    if (permutation.size() != order_.size() || cursor < 0 || std::size_t(cursor) > order_.size())
      throw UserError(source + " was written for " + std::to_string(permutation.size()) +
                      " training records, the data has " + std::to_string(order_.size()));
    std::istringstream(rng_state) >> rng_;
    order_.assign(permutation.begin(), permutation.end());
    cursor_ = std::size_t(cursor);
  }

 private:
  std::mt19937_64 rng_;
  std::vector<std::size_t> order_;
  std::size_t cursor_ = 0;
};

}  // namespace unstuck::train
