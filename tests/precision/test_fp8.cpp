// The FP8 contract (precision/fp8.h): the scale exponent is the smallest power of two that fits a
// channel's amax; round-to-nearest gives the nearest E4M3FN value times the scale (ties to an even
// code), checked against every E4M3FN value built from the format's definition; SR gives one of the
// two neighbours, unbiased; the edges (NaN, infinities, zeros, saturation, exact values) are as
// stated; the buffer kernels are the per-element rule for any split and thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "precision/precision_test_util.h"
#include "unstuck/common/simd.h"
#include "unstuck/precision/fp8.h"
#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::precision {
namespace {

// E4M3FN's value of code c (0..0x7E, sign clear), from the format's definition.
double e4m3_value(int c) {
  const int exp = (c >> 3) & 15, mant = c & 7;
  return exp == 0 ? mant * std::ldexp(1.0, -9) : (1.0 + mant / 8.0) * std::ldexp(1.0, exp - 7);
}

// Every finite non-negative E4M3FN value, ascending, with its code.
std::vector<std::pair<double, int>> e4m3_grid() {
  std::vector<std::pair<double, int>> grid;
  for (int c = 0; c <= 0x7E; ++c) grid.push_back({e4m3_value(c), c});
  return grid;
}

double bf16_value(uint16_t h) { return double(bf16_to_float(h)); }

TEST(Fp8Scale, TheExponentIsTheSmallestThatFitsTheChannel) {
  EXPECT_EQ(fp8_scale_exponent(448.0f), 0);
  EXPECT_EQ(fp8_scale_exponent(448.5f), 1);
  EXPECT_EQ(fp8_scale_exponent(1.0f), -8);
  EXPECT_EQ(fp8_scale_exponent(1.75f), -8);
  EXPECT_EQ(fp8_scale_exponent(1.76f), -7);
  EXPECT_EQ(fp8_scale_exponent(0.0f), 0);
  EXPECT_EQ(fp8_scale_exponent(-0.0f), 0);
  std::mt19937 rng(31);
  for (int i = 0; i < 100000; ++i) {
    // Normals over the whole range and subnormals.
    const float amax = i % 10 == 0 ? bits_float(rng() & 0x7FFFFFu) + 0.0f
                                   : std::ldexp(1.0f + float(rng() % 8388608) / 8388608.0f, int(rng() % 250) - 125);
    if (amax == 0.0f) continue;
    const int e = fp8_scale_exponent(amax);
    ASSERT_LE(double(amax), 448.0 * std::ldexp(1.0, e)) << amax;
    ASSERT_GT(double(amax), 448.0 * std::ldexp(1.0, e - 1)) << amax;
  }
}

// Round-to-nearest: the nearest grid value times 2^e (ties to the even code), for values across the
// normal and subnormal ranges of the scaled format, both signs, several scales; and the code of the
// result is that grid value's.
TEST(Fp8Rounding, NearestIsTheNearestScaledE4m3Value) {
  const auto grid = e4m3_grid();
  std::mt19937 rng(32);
  for (int i = 0; i < 200000; ++i) {
    const int e = int(rng() % 30) - 22;
    const double q = i % 3 == 0 ? double(rng() % 100000) / 100000.0 * 0.02  // the subnormal range and above
                                : double(rng() % 1000000) / 1000000.0 * 448.0;
    const float x = float(std::ldexp(q, e)) * (rng() % 2 ? 1.0f : -1.0f);
    const double qx = std::fabs(double(x)) * std::ldexp(1.0, -e);  // exact
    auto hi = std::lower_bound(grid.begin(), grid.end(), std::make_pair(qx, -1));
    ASSERT_NE(hi, grid.end());
    const auto lo = hi->first == qx || hi == grid.begin() ? hi : hi - 1;
    const double d_lo = qx - lo->first, d_hi = hi->first - qx;
    const auto want = d_lo < d_hi ? *lo : d_hi < d_lo ? *hi : (lo->second % 2 == 0 ? *lo : *hi);
    const uint16_t got = fp8_e4m3_scaled(x, e, false, 0);
    ASSERT_EQ(bf16_value(got), std::copysign(want.first * std::ldexp(1.0, e), double(x))) << "x=" << x << " e=" << e;
    ASSERT_EQ(fp8_e4m3_code(got, e), uint8_t((std::signbit(x) ? 0x80 : 0) | want.second)) << "x=" << x << " e=" << e;
    // SR lands on one of the two neighbours, for any bits.
    for (const uint32_t r : {0u, 0xFFFFFFFFu, uint32_t(rng())}) {
      const double sr = std::fabs(bf16_value(fp8_e4m3_scaled(x, e, true, r))) * std::ldexp(1.0, -e);
      ASSERT_TRUE(sr == lo->first || sr == hi->first) << "SR x=" << x << " e=" << e << " got " << sr;
    }
  }
}

// SR is unbiased: over 20000 draws per value the round-up frequency is the position between the
// neighbours within 5 binomial standard deviations (fixed seed 33), in both ranges of the format.
TEST(Fp8Rounding, StochasticIsUnbiased) {
  constexpr int kDraws = 20000;
  const auto grid = e4m3_grid();
  std::mt19937 rng(33);
  for (int i = 0; i < 60; ++i) {
    const int e = int(rng() % 10) - 12;
    const double q =
        i % 2 ? double(rng() % 1000000) / 1000000.0 * 0.0156 : 0.0157 + double(rng() % 1000000) / 1e6 * 400;
    const float x = float(std::ldexp(q, e));
    const double qx = double(x) * std::ldexp(1.0, -e);
    const auto hi = std::upper_bound(grid.begin(), grid.end(), std::make_pair(qx, 1000));
    const auto lo = hi - 1;
    if (lo->first == qx) continue;
    const double p = (qx - lo->first) / (hi->first - lo->first);
    int up = 0;
    for (int k = 0; k < kDraws; ++k)
      up += bf16_value(fp8_e4m3_scaled(x, e, true, rng())) * std::ldexp(1.0, -e) == hi->first;
    ASSERT_NEAR(double(up) / kDraws, p, 5 * std::sqrt(p * (1 - p) / kDraws) + 1.0 / kDraws) << "x=" << x << " e=" << e;
  }
}

TEST(Fp8Rounding, EdgesAreAsStated) {
  for (const int e : {-10, 0, 3}) {
    const double scale = std::ldexp(1.0, e);
    for (const bool sr : {false, true}) {
      EXPECT_EQ(fp8_e4m3_scaled(NAN, e, sr, 0x12345678u), kBf16CanonicalNan);
      EXPECT_EQ(bf16_value(fp8_e4m3_scaled(INFINITY, e, sr, 0xFFFFFFFFu)), 448.0 * scale);  // saturates
      EXPECT_EQ(bf16_value(fp8_e4m3_scaled(-INFINITY, e, sr, 0)), -448.0 * scale);
      EXPECT_EQ(bf16_value(fp8_e4m3_scaled(float(1000.0 * scale), e, sr, 0xFFFFFFFFu)), 448.0 * scale);
      EXPECT_EQ(fp8_e4m3_scaled(0.0f, e, sr, 0xFFFFFFFFu), 0x0000);
      EXPECT_EQ(fp8_e4m3_scaled(-0.0f, e, sr, 0xFFFFFFFFu), 0x8000);  // the sign of zero is kept
      for (int c = 1; c <= 0x7E; ++c) {                               // exact values never move, whatever the bits
        const float v = float(e4m3_value(c) * scale);
        for (const uint32_t r : {0u, 0xFFFFFFFFu})
          ASSERT_EQ(bf16_value(fp8_e4m3_scaled(-v, e, sr, r)), -double(v)) << c;
      }
    }
  }
  EXPECT_EQ(fp8_e4m3_code(kBf16CanonicalNan, 0), 0x7F);
}

// The FP32 kernel path equals the double-precision rule bit for bit wherever it is used (|e| <= 126),
// on stress values (NaN, infinities, subnormals, huge) and values near every scale's grid, both modes.
TEST(Fp8Rounding, TheFp32PathIsTheRuleBitForBit) {
  const std::vector<float> stress = testing::stress_values(1 << 16, 35);
  std::mt19937 rng(35);
  for (const int e : {-126, -60, -20, -12, -7, -1, 0, 1, 9, 60, 126}) {
    const double down = fp8_pow2(-e), up = fp8_pow2(e);
    for (std::size_t i = 0; i < stress.size(); ++i) {
      // Half the inputs as they come, half brought to the channel's range.
      const float s = stress[i];
      const bool scalable = std::isfinite(s) && s != 0.0f;
      const float x =
          i % 2 || !scalable ? s : float(double(s) * std::ldexp(1.0, e - std::ilogb(s) + int(rng() % 12) - 9));
      for (const bool sr : {false, true}) {
        const uint32_t r = rng();
        ASSERT_EQ(fp8_e4m3_scaled_fast(x, float(down), float(up), sr, r), fp8_e4m3_scaled_by(x, down, up, sr, r))
            << "x=" << x << " e=" << e << (sr ? " SR" : " RN");
      }
    }
  }
}

// Two matrices with other tensors around them: the buffer kernels give the per-element rule, and
// the channel maxima of two parts combined by max equal the whole's, for any thread count.
TEST(Fp8Rounding, BufferKernelsAreThePerElementRuleForAnySplit) {
  const std::vector<Fp8Matrix> matrices{{100, 7, 33, 0}, {400, 5, 64, 7}};  // rows 0-6 and 7-11
  const std::size_t n = 900;
  std::vector<float> x = testing::stress_values(n, 34);
  for (std::size_t i = 100; i < 900; ++i) x[i] = float(std::ldexp(double(x[i]), -int(i % 40)));  // varied row scales
  x[150] = NAN;
  x[410] = INFINITY;
  ASSERT_EQ(fp8_channel_count(matrices), 12u);
  std::vector<float> amax(12, 0.0f), parts(12, 0.0f);
  fp8_channel_amax(x.data(), n, 0, matrices, amax.data(), {1});
  const std::size_t cut = 137;  // inside row 1 of the first matrix
  fp8_channel_amax(x.data(), cut, 0, matrices, parts.data(), {2});
  fp8_channel_amax(x.data() + cut, n - cut, cut, matrices, parts.data(), {2});
  EXPECT_EQ(amax, parts);
  std::vector<int32_t> exponent(12);
  for (std::size_t r = 0; r < 12; ++r) {
    const Fp8Matrix& m = r < 7 ? matrices[0] : matrices[1];
    const uint64_t row = r - m.first_row;
    float want = 0;
    for (uint64_t c = 0; c < m.cols; ++c) {
      const float a = std::fabs(x[m.offset + row * m.cols + c]);
      if (std::isfinite(a)) want = std::max(want, a);
    }
    ASSERT_EQ(amax[r], want) << "row " << r;  // NaN and Inf left out
    exponent[r] = fp8_scale_exponent(amax[r]);
  }
  const SrKey key{0xFEEDull, 5};
  for (const bool sr : {false, true}) {
    std::vector<uint16_t> whole(n), split(n);
    materialize_fp8(x.data(), whole.data(), n, 0, matrices, exponent.data(), sr, key, {1});
    materialize_fp8(x.data(), split.data(), cut, 0, matrices, exponent.data(), sr, key, {2});
    materialize_fp8(x.data() + cut, split.data() + cut, n - cut, cut, matrices, exponent.data(), sr, key, {3});
    EXPECT_EQ(whole, split);
    for (std::size_t i = 0; i < n; ++i) {
      const Fp8Matrix* m = nullptr;
      for (const Fp8Matrix& cand : matrices)
        if (i >= cand.offset && i < cand.offset + cand.rows * cand.cols) m = &cand;
      const uint16_t want = m    ? fp8_e4m3_scaled(x[i], exponent[m->first_row + (i - m->offset) / m->cols], sr,
                                                   sr_bits_fp16(key.seed, key.step, i))
                            : sr ? bf16_sr(x[i], sr_bits_bf16(key.seed, key.step, i))
                                 : bf16_rn(x[i]);
      ASSERT_EQ(whole[i], want) << i << (sr ? " SR" : " RN");
    }
  }
}

// The vectorized rows (every SIMD level usable here) are the per-element rule bit for bit: long rows
// at unaligned global offsets (scalar heads and tails around whole tiles), the edge values, the
// subnormal range and exact ties in every row, exponents of both signs and the double path's.
TEST(Fp8Rounding, EverySimdLevelIsThePerElementRule) {
  const std::vector<Fp8Matrix> matrices{{77, 6, 1000, 0}, {6200, 4, 517, 6}};
  const std::size_t n = 8400;
  std::vector<float> x = testing::stress_values(n, 35);
  for (std::size_t i = 77; i < n; ++i) {
    const uint64_t row = i < 6200 ? (i - 77) / 1000 : 6 + (i - 6200) / 517;
    x[i] = float(std::ldexp(double(x[i]), -int(row * 7 % 30)));
    if (i % 97 == 0) x[i] = float(std::ldexp(1.0 + 2 * (i % 8) + 1, -13 - int(row * 7 % 30)));  // ties, subnormal
  }
  std::vector<int32_t> exponent{-9, 3, -20, 140, -140, 0, -1, -30, 8, -9};
  const SrKey key{0xABCDull, 11};
  for (const bool sr : {false, true}) {
    std::vector<uint16_t> want(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Fp8Matrix* m = nullptr;
      for (const Fp8Matrix& cand : matrices)
        if (i >= cand.offset && i < cand.offset + cand.rows * cand.cols) m = &cand;
      want[i] = m    ? fp8_e4m3_scaled(x[i], exponent[m->first_row + (i - m->offset) / m->cols], sr,
                                       sr_bits_fp16(key.seed, key.step, i))
                : sr ? bf16_sr(x[i], sr_bits_bf16(key.seed, key.step, i))
                     : bf16_rn(x[i]);
    }
    for (const SimdLevel simd : available_simd_levels()) {
      for (const std::size_t cut : {std::size_t(0), std::size_t(3333)}) {  // 3333: inside row 3
        std::vector<uint16_t> got(n, 0xFFFF);
        materialize_fp8(x.data(), got.data(), cut, 0, matrices, exponent.data(), sr, key, {1, simd});
        materialize_fp8(x.data() + cut, got.data() + cut, n - cut, cut, matrices, exponent.data(), sr, key, {2, simd});
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(got[i], want[i]) << "element " << i << " x=" << x[i] << (sr ? " SR" : " RN") << " simd "
                                     << int(simd) << " cut " << cut;
      }
    }
  }
}

}  // namespace
}  // namespace unstuck::precision
