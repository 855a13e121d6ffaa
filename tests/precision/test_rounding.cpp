// Rounding kernels: every SIMD path bit-exact against the scalar reference on stress inputs, RN equal
// to libtorch's casts, SR unbiased with the right round-up probability, and the SR contract's
// invariances (shards, threads, SIMD width) and keying (seed, step).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "precision/precision_test_util.h"
#include "unstuck/precision/philox.h"
#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision {
namespace {

using testing::all_round_modes;
using testing::as_bits;
using testing::reference_round;
using testing::stress_values;

std::vector<uint32_t> run_materialize(const std::vector<float>& x, RoundMode mode, SrKey key, uint64_t offset,
                                      KernelOptions opts) {
  std::vector<uint8_t> raw(x.size() * compute_element_bytes(mode), 0xAB);
  materialize(x.data(), raw.data(), x.size(), mode, key, offset, opts);
  return as_bits(raw, mode);
}

TEST(Philox, MatchesRandom123KnownAnswers) {
  const Philox4x32 zero = philox4x32_10({{0, 0, 0, 0}}, 0, 0);
  EXPECT_EQ(zero.v[0], 0x6627e8d5u);
  EXPECT_EQ(zero.v[1], 0xe169c58du);
  EXPECT_EQ(zero.v[2], 0xbc57ac4cu);
  EXPECT_EQ(zero.v[3], 0x9b00dbd8u);
  const Philox4x32 ones = philox4x32_10({{~0u, ~0u, ~0u, ~0u}}, ~0u, ~0u);
  EXPECT_EQ(ones.v[0], 0x408f276du);
  EXPECT_EQ(ones.v[1], 0x41c83b0eu);
  EXPECT_EQ(ones.v[2], 0xa20bc7c6u);
  EXPECT_EQ(ones.v[3], 0x6d5451fdu);
  const Philox4x32 pi = philox4x32_10({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0);
  EXPECT_EQ(pi.v[0], 0xd16cfe09u);
  EXPECT_EQ(pi.v[1], 0x94fdccebu);
  EXPECT_EQ(pi.v[2], 0x5001e420u);
  EXPECT_EQ(pi.v[3], 0x24126ea1u);
}

// Every SIMD level, thread count and (unaligned) offset gives the scalar reference's bits.
TEST(Rounding, EverySimdPathMatchesScalarReference) {
  const std::vector<float> x = stress_values(5000, 7);
  const SrKey key{0x1234567890ABCDEFull, 42};
  for (RoundMode mode : all_round_modes()) {
    for (uint64_t offset : {uint64_t(0), uint64_t(3), uint64_t(127), uint64_t(1) << 40}) {
      std::vector<uint32_t> ref(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) ref[i] = reference_round(x[i], mode, key, offset + i);
      for (SimdLevel simd : available_simd_levels()) {
        for (int threads : {1, 3}) {
          const auto got = run_materialize(x, mode, key, offset, {threads, simd});
          for (std::size_t i = 0; i < x.size(); ++i)
            ASSERT_EQ(got[i], ref[i]) << round_mode_name(mode) << " simd=" << simd_level_name(simd)
                                      << " offset=" << offset << " i=" << i << " x bits=" << std::hex
                                      << float_bits(x[i]);
        }
      }
    }
  }
}

// Round-to-nearest equals libtorch's own casts bit for bit (NaN: both NaN; libtorch's vectorized and
// scalar casts disagree on NaN payloads among themselves, we always write the canonical quiet NaN).
TEST(Rounding, NearestMatchesLibtorchCasts) {
  const std::vector<float> x = stress_values(1 << 16, 11);
  const torch::Tensor t = torch::from_blob(const_cast<float*>(x.data()), {int64_t(x.size())}).clone();
  const torch::Tensor tb = t.to(torch::kBFloat16).view(torch::kInt16);
  const torch::Tensor th = t.to(torch::kHalf).view(torch::kInt16);
  const auto bf = run_materialize(x, RoundMode::bf16_rn, {}, 0, {});
  const auto hf = run_materialize(x, RoundMode::fp16_rn, {}, 0, {});
  const int16_t* tbp = tb.data_ptr<int16_t>();
  const int16_t* thp = th.data_ptr<int16_t>();
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(bf16_to_float(uint16_t(bf[i]))));
      EXPECT_TRUE(std::isnan(fp16_to_float(uint16_t(hf[i]))));
      continue;
    }
    ASSERT_EQ(bf[i], uint16_t(tbp[i])) << "bf16 i=" << i << " x=" << x[i];
    ASSERT_EQ(hf[i], uint16_t(thp[i])) << "fp16 i=" << i << " x=" << x[i];
  }
}

TEST(Rounding, StochasticLeavesRepresentableValuesUnchanged) {
  std::mt19937 rng(3);
  std::vector<float> bf, hf;
  for (int i = 0; i < 20000; ++i) {
    const uint32_t r = rng();
    const float b = bits_float(r & 0xFFFF0000u);
    const float h = fp16_to_float(uint16_t(r));
    if (!std::isnan(b)) bf.push_back(b);
    if (!std::isnan(h)) hf.push_back(h);
  }
  for (uint64_t step : {1, 2, 3}) {
    const auto b = run_materialize(bf, RoundMode::bf16_sr, {9, step}, 0, {});
    const auto h = run_materialize(hf, RoundMode::fp16_sr, {9, step}, 0, {});
    for (std::size_t i = 0; i < bf.size(); ++i) ASSERT_EQ(b[i], float_bits(bf[i]) >> 16) << bf[i];
    for (std::size_t i = 0; i < hf.size(); ++i) ASSERT_EQ(h[i], fp16_rn(hf[i])) << hf[i];
  }
}

// Over S independent steps, each element's round-up frequency matches its fractional position p
// between its two neighbours within 5 binomial standard deviations (+1/S), and the mean rounded
// value matches the input: E[round(x)] = x. Values span 2^-30 .. 2^30 (BF16) and FP16's normal and
// subnormal ranges; fixed seeds.
void check_unbiased(RoundMode mode, const std::vector<float>& x) {
  constexpr int kSteps = 4096;
  std::vector<double> up(x.size(), 0), sum(x.size(), 0);
  for (int s = 1; s <= kSteps; ++s) {
    const auto r = run_materialize(x, mode, {2024, uint64_t(s)}, 1000, {});
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = testing::decode(r[i], mode);
      sum[i] += v;
      up[i] += std::fabs(v) > std::fabs(double(x[i]));
    }
  }
  double total_bias_ulps = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const RoundMode rn = mode == RoundMode::bf16_sr ? RoundMode::bf16_rn : RoundMode::fp16_rn;
    // Neighbours: lo = x truncated toward zero, hi = next value away from zero.
    const double ax = std::fabs(double(x[i]));
    double lo = std::fabs(testing::decode(reference_round(x[i], rn, {}, 0), rn));
    double hi = lo;
    const uint32_t lo_bits = reference_round(x[i], rn, {}, 0);
    if (lo > ax) {
      hi = lo;
      lo = std::fabs(testing::decode(lo_bits - 1, rn));
    } else {
      hi = std::fabs(testing::decode(lo_bits + 1, rn));
    }
    const double gap = hi - lo;
    const double p = gap > 0 ? (ax - lo) / gap : 0;
    const double freq = up[i] / kSteps;
    const double tol = 5 * std::sqrt(p * (1 - p) / kSteps) + 1.0 / kSteps;
    ASSERT_NEAR(freq, p, tol) << round_mode_name(mode) << " x=" << x[i];
    const double bias_ulps = (sum[i] / kSteps - double(x[i])) / gap;
    ASSERT_LT(std::fabs(bias_ulps), 5 * 0.5 / std::sqrt(double(kSteps)) + 1e-9) << "x=" << x[i];
    total_bias_ulps += bias_ulps;
  }
  // Averaged over all elements the bias (in ulps) must vanish: 5 sigma of the mean of N means.
  EXPECT_LT(std::fabs(total_bias_ulps / x.size()), 5 * 0.5 / std::sqrt(double(kSteps) * x.size()));
}

TEST(Rounding, StochasticBf16IsUnbiased) {
  std::mt19937 rng(5);
  std::vector<float> x;
  for (int i = 0; i < 600; ++i) {
    const float mag = std::ldexp(1.0f + float(rng() % 1000000) / 1000000.0f, int(rng() % 61) - 30);
    x.push_back(rng() % 2 ? mag : -mag);
  }
  check_unbiased(RoundMode::bf16_sr, x);
}

TEST(Rounding, StochasticFp16IsUnbiased) {
  std::mt19937 rng(6);
  std::vector<float> x;
  for (int i = 0; i < 600; ++i) {
    // 2^-27 .. 2^15: subnormal FP16 range included, below 65504.
    const float mag = std::ldexp(1.0f + float(rng() % 1000000) / 1000000.0f, int(rng() % 42) - 27);
    x.push_back(rng() % 2 ? mag : -mag);
  }
  check_unbiased(RoundMode::fp16_sr, x);
}

// Documented behaviour at the top of each format's range.
TEST(Rounding, StochasticOverflowEdges) {
  constexpr int kSteps = 4000;
  int bf16_inf = 0, fp16_inf = 0;
  for (int s = 0; s < kSteps; ++s) {
    // FLT_MAX lies 65535/65536 of the way from max BF16 to 2^128 (written as Inf).
    bf16_inf += bf16_sr(bits_float(0x7F7FFFFFu), sr_bits_bf16(1, s, 5)) == 0x7F80;
    // 65535 lies 31/32 of the way from 65504 to 65536 (written as Inf).
    fp16_inf += fp16_sr(65535.0f, sr_bits_fp16(1, s, 5)) == 0x7C00;
  }
  EXPECT_NEAR(bf16_inf / double(kSteps), 65535.0 / 65536.0, 0.01);
  EXPECT_NEAR(fp16_inf / double(kSteps), 31.0 / 32.0, 0.02);
  EXPECT_EQ(fp16_sr(65536.0f, 0), 0x7C00);
  EXPECT_EQ(fp16_sr(-1e9f, 0), 0xFC00);
  EXPECT_EQ(fp16_sr(65504.0f, 0xFFFFFFFFu), 0x7BFF);
  EXPECT_EQ(bf16_sr(bits_float(0x7F7F0000u), 0xFFFF), 0x7F7F);
  EXPECT_EQ(bf16_sr(-INFINITY, 0xFFFF), 0xFF80);
  EXPECT_EQ(bf16_sr(NAN, 0), kBf16CanonicalNan);
  EXPECT_EQ(fp16_sr(NAN, 0), kFp16CanonicalNan);
  // Below half of FP16's smallest subnormal, SR still rounds up with probability x / 2^-24.
  EXPECT_EQ(fp16_sr(std::ldexp(1.0f, -26), 0), 0x0001);            // r < threshold
  EXPECT_EQ(fp16_sr(std::ldexp(1.0f, -26), 0xFFFFFFFFu), 0x0000);  // r >= threshold
}

// One call == shards with their global offsets == other thread counts == other SIMD widths.
TEST(Rounding, ShardedAndThreadedCallsGiveIdenticalBits) {
  const std::vector<float> x = stress_values(100003, 13);
  const SrKey key{77, 5};
  for (RoundMode mode : {RoundMode::bf16_sr, RoundMode::fp16_sr, RoundMode::bf16_rn}) {
    const auto whole = run_materialize(x, mode, key, 0, {1, detect_simd_level()});
    for (std::size_t shards : {2, 3, 7}) {
      std::vector<uint32_t> joined;
      const std::size_t per = (x.size() + shards - 1) / shards;
      for (std::size_t s = 0; s * per < x.size(); ++s) {
        const std::size_t b = s * per, e = std::min(x.size(), b + per);
        std::vector<float> part(x.begin() + b, x.begin() + e);
        const auto r = run_materialize(part, mode, key, b, {int(s % 2) + 1, detect_simd_level()});
        joined.insert(joined.end(), r.begin(), r.end());
      }
      ASSERT_EQ(joined, whole) << round_mode_name(mode) << " shards=" << shards;
    }
    for (int threads : {2, 4, 5}) ASSERT_EQ(run_materialize(x, mode, key, 0, {threads, SimdLevel::scalar}), whole);
  }
}

TEST(Rounding, SameKeySameBitsOtherStepOrSeedOtherBits) {
  std::vector<float> x(4096);
  std::mt19937 rng(17);
  for (float& v : x) v = bits_float(0x3F800000u | (rng() & 0x007FFFFFu));  // [1, 2), random low bits
  for (RoundMode mode : {RoundMode::bf16_sr, RoundMode::fp16_sr}) {
    const auto a = run_materialize(x, mode, {1, 10}, 0, {});
    EXPECT_EQ(a, run_materialize(x, mode, {1, 10}, 0, {}));
    for (SrKey other : {SrKey{1, 11}, SrKey{2, 10}}) {
      const auto b = run_materialize(x, mode, other, 0, {});
      std::size_t differ = 0;
      for (std::size_t i = 0; i < x.size(); ++i) differ += a[i] != b[i];
      // Each element differs with probability 2p(1-p), about 1/3 on average here: demand > 20%.
      EXPECT_GT(differ, x.size() / 5) << round_mode_name(mode);
    }
  }
}

TEST(Rounding, CountNonfinite) {
  std::vector<float> x(1 << 20, 1.0f);
  EXPECT_EQ(count_nonfinite(x.data(), x.size()), 0u);
  x[12345] = INFINITY;
  x[999999] = NAN;
  x[0] = -INFINITY;
  EXPECT_EQ(count_nonfinite(x.data(), x.size(), {1, SimdLevel::scalar}), 3u);
  EXPECT_EQ(count_nonfinite(x.data(), x.size(), {4, SimdLevel::scalar}), 3u);
}

// ---- the grid-scaled analog (precision.analog_mantissa_bits) ---------------------------------------

// At BF16's own 7 mantissa bits the analog is BF16: the same bits as bf16_rn / bf16_sr on stress
// values (edges, subnormals, Inf, NaN, overflow).
TEST(CoarseRounding, SevenBitsIsBf16) {
  const std::vector<float> x = stress_values(1 << 16, 21);
  std::mt19937 rng(21);
  for (const float v : x) {
    const uint32_t r32 = rng();
    ASSERT_EQ(bf16_coarse_rn(v, 7), bf16_rn(v)) << v;
    ASSERT_EQ(bf16_coarse_sr(v, 7, r32), bf16_sr(v, r32 >> 16)) << v;
  }
}

// The value of a BF16 pattern, widened (double holds every BF16 value exactly).
double bf16_value(uint16_t h) { return double(bf16_to_float(h)); }

// Fewer bits: the result sits on the coarse grid (its low 7 - m mantissa bits are zero), is one of
// x's two neighbours on that grid, and round-to-nearest picks the nearer one (ties to an even
// coarse mantissa), checked in double against neighbours built from the grid's definition.
TEST(CoarseRounding, NearestIsTheNearestPointOfTheCoarseGrid) {
  std::mt19937 rng(22);
  for (int m = 1; m <= 6; ++m) {
    const uint16_t low_mask = uint16_t((1u << (7 - m)) - 1u);
    for (int i = 0; i < 20000; ++i) {
      const float mag = std::ldexp(1.0f + float(rng() % 1000000) / 1000000.0f, int(rng() % 61) - 30);
      const float x = rng() % 2 ? mag : -mag;
      const uint16_t rn = bf16_coarse_rn(x, m);
      ASSERT_EQ(rn & low_mask, 0) << "m=" << m << " x=" << x;
      // Neighbours: x's FP32 pattern truncated to m bits (toward zero) and the next grid point out.
      const uint32_t step = 1u << (23 - m);
      const uint32_t lo_bits = float_bits(x) / step * step;
      const double lo = double(bits_float(lo_bits)), hi = double(bits_float(lo_bits + step));
      const double got = bf16_value(rn), dx = double(x);
      ASSERT_TRUE(got == lo || got == hi) << "m=" << m << " x=" << x << " got " << got;
      const double d_lo = std::fabs(dx - lo), d_hi = std::fabs(hi - dx);
      if (d_lo != d_hi) {
        ASSERT_EQ(got, d_lo < d_hi ? lo : hi) << "m=" << m << " x=" << x;
      } else {
        ASSERT_EQ(((float_bits(float(got)) >> (23 - m)) & 1u), 0u) << "tie to even, m=" << m << " x=" << x;
      }
      for (const uint32_t r : {0u, 0xFFFFFFFFu, uint32_t(rng())}) {
        const double sr = bf16_value(bf16_coarse_sr(x, m, r));
        ASSERT_TRUE(sr == lo || sr == hi) << "SR, m=" << m << " x=" << x;
      }
    }
    // Grid points never move; Inf stays Inf, NaN is BF16's canonical NaN; a carry past the largest
    // finite coarse value is Inf.
    const float on_grid = bits_float(0x3F800000u | (1u << (23 - m)));  // 1 + 2^-m
    EXPECT_EQ(bf16_value(bf16_coarse_rn(on_grid, m)), double(on_grid));
    EXPECT_EQ(bf16_value(bf16_coarse_sr(on_grid, m, 0xFFFFFFFFu)), double(on_grid));
    EXPECT_EQ(bf16_coarse_rn(INFINITY, m), 0x7F80);
    EXPECT_EQ(bf16_coarse_sr(-INFINITY, m, 0xFFFFFFFFu), 0xFF80);
    EXPECT_EQ(bf16_coarse_rn(NAN, m), kBf16CanonicalNan);
    EXPECT_EQ(bf16_coarse_rn(3.4e38f, m), 0x7F80) << "m=" << m;
  }
}

// SR on the coarse grid is unbiased: over 20000 random draws per value the round-up frequency is the
// position between the neighbours within 5 binomial standard deviations (fixed seed 23).
TEST(CoarseRounding, StochasticIsUnbiased) {
  constexpr int kDraws = 20000;
  std::mt19937 rng(23);
  for (const int m : {2, 4, 6}) {
    for (int i = 0; i < 40; ++i) {
      const float x = std::ldexp(1.0f + float(rng() % 1000000) / 1000000.0f, int(rng() % 21) - 10);
      const uint32_t step = 1u << (23 - m);
      const uint32_t lo_bits = float_bits(x) / step * step;
      const double lo = double(bits_float(lo_bits)), hi = double(bits_float(lo_bits + step));
      const double p = (double(x) - lo) / (hi - lo);
      int up = 0;
      for (int k = 0; k < kDraws; ++k) up += bf16_value(bf16_coarse_sr(x, m, rng())) == hi;
      ASSERT_NEAR(double(up) / kDraws, p, 5 * std::sqrt(p * (1 - p) / kDraws) + 1.0 / kDraws)
          << "m=" << m << " x=" << x;
    }
  }
}

// The buffer version keys SR by global index only: a whole buffer, its two shards (with their global
// offsets) and any thread count give the same bits, each equal to the per-element function.
TEST(CoarseRounding, MaterializeIsThePerElementFunctionForAnySplit) {
  const std::vector<float> x = stress_values(70001, 24);
  const SrKey key{0x1234567890ull, 9};
  for (const bool sr : {false, true}) {
    std::vector<uint16_t> whole(x.size()), parts(x.size());
    materialize_coarse_bf16(x.data(), whole.data(), x.size(), 4, sr, key, 0, {1});
    const std::size_t cut = 33333;
    materialize_coarse_bf16(x.data(), parts.data(), cut, 4, sr, key, 0, {2});
    materialize_coarse_bf16(x.data() + cut, parts.data() + cut, x.size() - cut, 4, sr, key, cut, {2});
    EXPECT_EQ(whole, parts) << (sr ? "SR" : "RN");
    for (std::size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = sr ? bf16_coarse_sr(x[i], 4, sr_bits_fp16(key.seed, key.step, i)) : bf16_coarse_rn(x[i], 4);
      ASSERT_EQ(whole[i], want) << i;
    }
  }
  std::vector<uint16_t> out(4);
  EXPECT_THROW(materialize_coarse_bf16(x.data(), out.data(), 4, 8, false, key), std::invalid_argument);
}

}  // namespace
}  // namespace unstuck::precision
