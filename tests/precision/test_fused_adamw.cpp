// Fused AdamW: bit-exact against the scalar reference on every SIMD path and thread count, equal to
// libtorch's FP32 AdamW (then rounding) within FP32 rounding noise, correct sticking counts, decay
// mask, gradient scaling, shard invariance and rejected hyper-parameters.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "precision/precision_test_util.h"
#include "unstuck/precision/fused_adamw.h"

namespace unstuck::precision {
namespace {

using testing::all_round_modes;

struct State {
  std::vector<float> master, grad, m, v;
  std::vector<uint8_t> compute;
};

State make_state(std::size_t n, RoundMode mode, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> w(0.0f, 0.05f), g(0.0f, 1e-3f);
  State s;
  for (std::size_t i = 0; i < n; ++i) {
    s.master.push_back(w(rng));
    s.grad.push_back(g(rng));
    s.m.push_back(g(rng) * 0.1f);
    s.v.push_back(std::fabs(g(rng)) * 1e-3f);
  }
  s.compute.assign(n * compute_element_bytes(mode), 0);
  materialize(s.master.data(), s.compute.data(), n, mode, {}, 0, {1, SimdLevel::scalar});
  return s;
}

AdamWBuffers buffers_of(State& s, uint64_t base = 0) {
  return {s.master.data(), s.grad.data(), s.m.data(), s.v.data(), s.compute.data(), base};
}

// Scalar reference: adamw_element then reference rounding, element by element.
uint64_t reference_step(State& s, const std::vector<Segment>& segs, const AdamWHyper& h, RoundMode mode, SrKey key,
                        uint64_t base = 0) {
  const AdamWScalars sc = adamw_scalars(h);
  uint64_t changed = 0;
  std::vector<uint32_t> before = testing::as_bits(s.compute, mode);
  for (const Segment& seg : segs)
    for (uint64_t g = seg.offset; g < seg.offset + seg.size; ++g) {
      const std::size_t i = g - base;
      adamw_element(s.master[i], s.m[i], s.v[i], s.grad[i], seg.decay, sc);
      const uint32_t bits = testing::reference_round(s.master[i], mode, key, g);
      changed += bits != before[i];
      if (compute_element_bytes(mode) == 4)
        std::memcpy(s.compute.data() + 4 * i, &bits, 4);
      else {
        const uint16_t h16 = uint16_t(bits);
        std::memcpy(s.compute.data() + 2 * i, &h16, 2);
      }
    }
  return changed;
}

const std::vector<Segment> kSegments = {
    {0, 1000, true}, {1000, 37, false}, {1037, 5000, true}, {6037, 129, false}, {6166, 70000, true}};
constexpr std::size_t kN = 76166;

TEST(FusedAdamW, EverySimdPathAndThreadCountMatchesScalarReference) {
  AdamWHyper h;
  h.lr = 3e-4;
  h.weight_decay = 0.1;
  h.step = 7;
  h.grad_scale = 0.5;
  for (RoundMode mode : all_round_modes()) {
    State ref = make_state(kN, mode, 1);
    const SrKey key{99, 7};
    const uint64_t ref_changed = reference_step(ref, kSegments, h, mode, key);
    for (SimdLevel simd : available_simd_levels())
      for (int threads : {1, 2, 3}) {
        State s = make_state(kN, mode, 1);
        const AdamWStepStats st = fused_adamw_step(buffers_of(s), kSegments, h, mode, key, {threads, simd});
        const std::string where =
            std::string(round_mode_name(mode)) + " " + simd_level_name(simd) + " threads=" + std::to_string(threads);
        ASSERT_EQ(s.master, ref.master) << where;
        ASSERT_EQ(s.m, ref.m) << where;
        ASSERT_EQ(s.v, ref.v) << where;
        ASSERT_EQ(s.compute, ref.compute) << where;
        ASSERT_EQ(st.changed_total, ref_changed) << where;
        ASSERT_EQ(st.elements, kN);
      }
  }
}

// Sticking counts per segment equal a direct comparison of the compute weights before and after.
TEST(FusedAdamW, ChangedCountsPerSegment) {
  AdamWHyper h;
  h.lr = 1e-5;  // small: BF16 RN leaves most weights stuck, exactly what the count must show
  for (RoundMode mode : {RoundMode::bf16_rn, RoundMode::bf16_sr, RoundMode::fp16_rn, RoundMode::fp32}) {
    State s = make_state(kN, mode, 2);
    const auto before = testing::as_bits(s.compute, mode);
    const AdamWStepStats st = fused_adamw_step(buffers_of(s), kSegments, h, mode, {5, 1});
    const auto after = testing::as_bits(s.compute, mode);
    uint64_t total = 0;
    for (std::size_t k = 0; k < kSegments.size(); ++k) {
      uint64_t direct = 0;
      for (uint64_t i = kSegments[k].offset; i < kSegments[k].offset + kSegments[k].size; ++i)
        direct += before[i] != after[i];
      EXPECT_EQ(st.changed[k], direct) << round_mode_name(mode) << " segment " << k;
      total += direct;
    }
    EXPECT_EQ(st.changed_total, total);
  }
}

// FP32 master after K steps equals libtorch's torch::optim::AdamW on FP32 tensors within FP32
// rounding noise (libtorch may fuse multiply-adds; we never do): 2e-6 relative, plus 8 ulps of the
// starting weight for masters that cancelled towards zero. The compute weights are exactly the
// rounding of our master.
TEST(FusedAdamW, MatchesLibtorchAdamWThenRounding) {
  const std::size_t n = 20000;
  AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.05;
  h.eps = 1e-8;
  State s = make_state(n, RoundMode::bf16_rn, 3);
  const std::vector<float> start = s.master;
  std::fill(s.m.begin(), s.m.end(), 0.0f);
  std::fill(s.v.begin(), s.v.end(), 0.0f);
  torch::Tensor p = torch::tensor(s.master).set_requires_grad(true);
  torch::optim::AdamW opt(
      {p}, torch::optim::AdamWOptions(h.lr).betas({h.beta1, h.beta2}).eps(h.eps).weight_decay(h.weight_decay));
  std::mt19937 rng(4);
  std::normal_distribution<float> g(0.0f, 1e-2f);
  for (int step = 1; step <= 5; ++step) {
    for (float& x : s.grad) x = g(rng);
    p.mutable_grad() = torch::tensor(s.grad);
    opt.step();
    h.step = step;
    fused_adamw_step(buffers_of(s), {{0, n, true}}, h, RoundMode::bf16_rn, {});
  }
  const float* tp = p.data_ptr<float>();
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_NEAR(s.master[i], tp[i], 2e-6 * std::fabs(tp[i]) + 8 * std::ldexp(std::fabs(start[i]), -23)) << "i=" << i;
  const auto compute = testing::as_bits(s.compute, RoundMode::bf16_rn);
  const torch::Tensor rounded = p.detach().to(torch::kBFloat16).view(torch::kInt16);
  std::size_t differ = 0;
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(compute[i], bf16_rn(s.master[i]));
    differ += compute[i] != uint16_t(rounded.data_ptr<int16_t>()[i]);
  }
  // Only masters that sit within FP32 noise of a BF16 rounding boundary may round differently.
  EXPECT_LT(differ, n / 1000);
}

TEST(FusedAdamW, DecayMaskAndGradScale) {
  AdamWHyper h;
  h.lr = 1e-3;
  h.weight_decay = 0.5;
  State decayed = make_state(2048, RoundMode::fp32, 8), undecayed = decayed, no_wd = decayed;
  fused_adamw_step(buffers_of(decayed), {{0, 2048, true}}, h, RoundMode::fp32, {});
  fused_adamw_step(buffers_of(undecayed), {{0, 2048, false}}, h, RoundMode::fp32, {});
  AdamWHyper h0 = h;
  h0.weight_decay = 0;
  fused_adamw_step(buffers_of(no_wd), {{0, 2048, true}}, h0, RoundMode::fp32, {});
  EXPECT_EQ(undecayed.master, no_wd.master);
  EXPECT_NE(decayed.master, no_wd.master);
  // Gradients scaled by 1024 with grad_scale 1/1024 give the unscaled result exactly (power of 2).
  State plain = make_state(2048, RoundMode::bf16_sr, 9), scaled = plain;
  for (float& x : scaled.grad) x *= 1024.0f;
  AdamWHyper hs = h;
  hs.grad_scale = 1.0 / 1024.0;
  fused_adamw_step(buffers_of(plain), {{0, 2048, true}}, h, RoundMode::bf16_sr, {3, 1});
  fused_adamw_step(buffers_of(scaled), {{0, 2048, true}}, hs, RoundMode::bf16_sr, {3, 1});
  EXPECT_EQ(plain.master, scaled.master);
  EXPECT_EQ(plain.compute, scaled.compute);
}

// Updating two shards separately (each with its own base) equals one update of the whole buffer.
TEST(FusedAdamW, ShardedUpdateEqualsWhole) {
  AdamWHyper h;
  h.lr = 2e-5;
  h.step = 3;
  const RoundMode mode = RoundMode::bf16_sr;
  State whole = make_state(kN, mode, 10);
  State shard = whole;
  fused_adamw_step(buffers_of(whole), kSegments, h, mode, {1, 3});
  const uint64_t cut = 3001;  // inside the third segment, not tile aligned
  for (int part = 0; part < 2; ++part) {
    std::vector<Segment> segs;
    for (Segment s : kSegments) {
      const uint64_t b = std::max<uint64_t>(s.offset, part ? cut : 0);
      const uint64_t e = std::min<uint64_t>(s.offset + s.size, part ? kN : cut);
      if (b < e) segs.push_back({b, e - b, s.decay});
    }
    const uint64_t base = part ? cut : 0;
    AdamWBuffers b{shard.master.data() + base, shard.grad.data() + base,        shard.m.data() + base,
                   shard.v.data() + base,      shard.compute.data() + base * 2, base};
    fused_adamw_step(b, segs, h, mode, {1, 3});
  }
  EXPECT_EQ(shard.master, whole.master);
  EXPECT_EQ(shard.compute, whole.compute);
}

TEST(FusedAdamW, RejectsBadHyperParameters) {
  State s = make_state(16, RoundMode::fp32, 1);
  AdamWHyper h;
  h.lr = -1;
  EXPECT_THROW(fused_adamw_step(buffers_of(s), {{0, 16, true}}, h, RoundMode::fp32, {}), std::invalid_argument);
  h = {};
  h.beta2 = 1.0;
  EXPECT_THROW(fused_adamw_step(buffers_of(s), {{0, 16, true}}, h, RoundMode::fp32, {}), std::invalid_argument);
  h = {};
  h.step = 0;
  EXPECT_THROW(fused_adamw_step(buffers_of(s), {{0, 16, true}}, h, RoundMode::fp32, {}), std::invalid_argument);
}

}  // namespace
}  // namespace unstuck::precision
