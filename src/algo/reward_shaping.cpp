// DAPO's soft overlong punishment (see reward_shaping.h for the worked example).
#include "unstuck/algo/reward_shaping.h"

#include <stdexcept>
#include <string>

namespace unstuck::algo {

double overlong_penalty(int64_t length, int64_t max_len, int64_t buffer) {
  if (buffer < 1 || buffer > max_len)
    throw std::invalid_argument("overlong_penalty: buffer " + std::to_string(buffer) + " must be in [1, " +
                                std::to_string(max_len) + "]");
  const int64_t free_len = max_len - buffer;
  if (length <= free_len) return 0.0;
  if (length > max_len) return -1.0;
  return double(free_len - length) / double(buffer);
}

}  // namespace unstuck::algo
