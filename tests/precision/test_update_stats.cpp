// The update statistics the optimizer takes over bounded slices (update_stats.h) against their
// full-size definitions in libtorch: changed elements by bit comparison, and per-block sums of the
// squared update and squared old weights, for every compute dtype; the sums do not depend on how
// the buffer is sliced or on the thread count.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "precision/update_stats.h"

namespace unstuck::precision {
namespace {

struct Pair {
  torch::Tensor before, after;
};

// Weights and a small update of them in `dtype`: some elements move, most keep their bits, one
// +0 becomes -0 (a bit change at equal value).
Pair weights(torch::ScalarType dtype, int64_t n) {
  torch::manual_seed(3);
  const torch::Tensor w = torch::randn({n});
  const torch::Tensor step = torch::randn({n}) * 3e-2 * (torch::rand({n}) < 0.3).to(torch::kFloat32);
  Pair p{w.to(dtype), (w + step).to(dtype)};
  p.before[5] = 0.0;
  p.after[5] = -0.0;
  return p;
}

TEST(UpdateStats, WorkedExample) {
  const float before[2] = {1, 2}, after[2] = {1, 4};
  double delta = 0, weight = 0;
  add_block_update_sums(before, after, 2, RoundMode::fp32, 2, &delta, &weight);
  EXPECT_EQ(delta, 4.0);
  EXPECT_EQ(weight, 5.0);
  EXPECT_EQ(count_changed_bits(before, after, 2, RoundMode::fp32), 1u);
}

TEST(UpdateStats, EqualTheFullSizeDefinitions) {
  const int64_t n = 100003, block = 4096;
  for (auto [dtype, mode] :
       {std::pair{torch::kFloat32, RoundMode::fp32}, std::pair{torch::kBFloat16, RoundMode::bf16_sr},
        std::pair{torch::kHalf, RoundMode::fp16_rn}}) {
    const Pair p = weights(dtype, n);
    // Changed: the bits differ (a view as integers of the same width).
    const torch::ScalarType bits = dtype == torch::kFloat32 ? torch::kInt32 : torch::kInt16;
    const int64_t want_changed = p.before.view(bits).ne(p.after.view(bits)).sum().item<int64_t>();
    EXPECT_GT(want_changed, n / 10);
    EXPECT_EQ(count_changed_bits(p.before.data_ptr(), p.after.data_ptr(), std::size_t(n), mode),
              uint64_t(want_changed));
    const int64_t blocks = (n + block - 1) / block;
    std::vector<double> delta(blocks, 0.0), weight(blocks, 0.0);
    add_block_update_sums(p.before.data_ptr(), p.after.data_ptr(), std::size_t(n), mode, block, delta.data(),
                          weight.data());
    const torch::Tensor b = p.before.to(torch::kFloat32), a = p.after.to(torch::kFloat32);
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t s = k * block, len = std::min(block, n - s);
      const double want_d =
          (a.narrow(0, s, len) - b.narrow(0, s, len)).to(torch::kDouble).square().sum().item<double>();
      const double want_w = b.narrow(0, s, len).to(torch::kDouble).square().sum().item<double>();
      // Summation order differs from libtorch's: relative 1e-12 in double.
      EXPECT_NEAR(delta[k], want_d, 1e-12 * want_d + 1e-300) << k;
      EXPECT_NEAR(weight[k], want_w, 1e-12 * want_w) << k;
    }
    // Sliced at block boundaries (as the optimizer's slices are) and on one thread: bit-identical.
    std::vector<double> d2(blocks, 0.0), w2(blocks, 0.0);
    KernelOptions one;
    one.threads = 1;
    const std::size_t esize = dtype == torch::kFloat32 ? 4 : 2;
    for (int64_t s = 0; s < n; s += 3 * block) {
      const int64_t len = std::min<int64_t>(3 * block, n - s);
      add_block_update_sums(static_cast<const char*>(p.before.data_ptr()) + s * esize,
                            static_cast<const char*>(p.after.data_ptr()) + s * esize, std::size_t(len), mode, block,
                            d2.data() + s / block, w2.data() + s / block, one);
    }
    EXPECT_EQ(d2, delta);
    EXPECT_EQ(w2, weight);
  }
}

}  // namespace
}  // namespace unstuck::precision
