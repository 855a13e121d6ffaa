// WeightFormat: each precision mode's format rounds with its own kernel (materialize, the analog
// grid's coarse rounding, FP8's per-channel rule), its update is the fused AdamW step that writes
// those bits (FP8's deferred until its scales are taken), and a slice's changes are counted per
// tensor. The trainer-level bits are test_device_weights.cpp's; this is the format on its own.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/precision/fp8.h"
#include "unstuck/precision/weight_format.h"

namespace unstuck::precision {
namespace {

constexpr uint64_t kSeed = 0xC0FFEE1234ull;
constexpr std::size_t kN = 3000;
// Two 20 x 50 matrices (FP8 channels) from element 500 on; the rest is "other" tensors.
const std::vector<Fp8Matrix> kMatrices = {{500, 20, 50, 0}, {1500, 20, 50, 20}};

std::vector<float> values(uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(kN);
  for (float& x : v) x = d(rng);
  return v;
}

PrecisionConfig precision_of(PrecisionMode mode, int analog_bits = 0) {
  PrecisionConfig p;
  p.mode = mode;
  p.analog_mantissa_bits = analog_bits;
  p.threads = 1;
  return p;
}

// The bits the mode's own kernel writes for master[0, kN) from global index `begin` at `step`.
std::vector<uint16_t> reference_bits(const PrecisionConfig& p, const std::vector<float>& master, uint64_t begin,
                                     uint64_t step, const std::vector<int32_t>& exponent) {
  std::vector<uint16_t> out(kN);
  const SrKey key{kSeed, step};
  if (is_fp8(p.mode))
    materialize_fp8(master.data(), out.data(), kN, begin, kMatrices, exponent.data(), p.mode == PrecisionMode::fp8_sr,
                    key);
  else if (p.analog_mantissa_bits > 0)
    materialize_coarse_bf16(master.data(), out.data(), kN, p.analog_mantissa_bits, p.mode == PrecisionMode::bf16_sr,
                            key, begin);
  else
    materialize(master.data(), out.data(), kN, round_mode_for(p.mode), key, begin);
  return out;
}

std::vector<int32_t> exponents_of(const std::vector<float>& master) {
  std::vector<float> amax(fp8_channel_count(kMatrices), 0.0f);
  fp8_channel_amax(master.data(), kN, 0, kMatrices, amax.data());
  std::vector<int32_t> exponent;
  set_fp8_exponents(amax.data(), amax.size(), exponent);
  return exponent;
}

struct Case {
  PrecisionMode mode;
  int analog_bits;
};

class Formats : public ::testing::TestWithParam<Case> {};

TEST_P(Formats, MaterializeIsTheModesKernel) {
  const PrecisionConfig p = precision_of(GetParam().mode, GetParam().analog_bits);
  const auto format = WeightFormat::make(p, kSeed, Place{}, kMatrices);
  const std::vector<float> master = values(1, 0.03f);
  format->rescale(master.data(), 0, kN, {});
  const std::vector<uint16_t> want = reference_bits(p, master, 0, 7, exponents_of(master));
  std::vector<uint16_t> got(kN);
  format->materialize(master.data(), 0, kN, got.data(), 7);
  EXPECT_EQ(got, want);
  EXPECT_EQ(format->deferred(), is_fp8(p.mode)) << "only a format with scales waits for the whole master";
  EXPECT_EQ(format->scales() != nullptr, is_fp8(p.mode));
}

TEST_P(Formats, UpdateIsTheFusedStepThenTheFormatsRounding) {
  const PrecisionConfig p = precision_of(GetParam().mode, GetParam().analog_bits);
  const auto format = WeightFormat::make(p, kSeed, Place{}, kMatrices);
  std::vector<float> master = values(2, 0.03f), grad = values(3, 1.0f), m(kN, 0.0f), v(kN, 0.0f);
  std::vector<float> ref_master = master, ref_m = m, ref_v = v;
  std::vector<uint16_t> out(kN, 0), ref_out(kN, 0);
  const std::vector<Segment> segments = {{0, 500, false}, {500, 2000, true}, {2500, 500, false}};
  AdamWHyper hyper;
  hyper.lr = 1e-3;
  hyper.weight_decay = 0.1;
  format->update({master.data(), grad.data(), m.data(), v.data(), out.data(), 0}, kN, segments, hyper, 1);
  // The reference: the fused kernel in the mode's BF16/FP16 rounding (FP8 modes: BF16 to nearest,
  // their output discarded), then the format's own rounding of the new master.
  const RoundMode fused = is_fp8(p.mode) ? RoundMode::bf16_rn : round_mode_for(p.mode);
  fused_adamw_step({ref_master.data(), grad.data(), ref_m.data(), ref_v.data(), ref_out.data(), 0}, segments, hyper,
                   fused, {kSeed, 1}, {1});
  EXPECT_EQ(master, ref_master);
  EXPECT_EQ(m, ref_m);
  EXPECT_EQ(v, ref_v);
  if (format->deferred()) {
    format->rescale(master.data(), 0, kN, {});
    format->materialize(master.data(), 0, kN, out.data(), 1);
  }
  EXPECT_EQ(out, reference_bits(p, ref_master, 0, 1, exponents_of(ref_master)));
}

TEST_P(Formats, AnotherMastersScalesAndAnyOffsetGiveTheKernelsBits) {
  const PrecisionConfig p = precision_of(GetParam().mode, GetParam().analog_bits);
  const auto format = WeightFormat::make(p, kSeed, Place{}, kMatrices);
  const std::vector<float> base = values(4, 0.05f), master = values(5, 0.02f);
  format->rescale(master.data(), 0, kN, {});
  Fp8Channels base_scales{kMatrices, exponents_of(base)};
  std::vector<uint16_t> got(kN);
  format->materialize(master.data(), 0, kN, got.data(), 3, &base_scales);
  EXPECT_EQ(got, reference_bits(p, master, 0, 3, base_scales.exponent)) << "FP8: the given scales, not its own";
  // A slice from global index 1000: the kernel's bits for that offset (keyed by global index).
  std::vector<uint16_t> whole(kN), slice(kN - 1000);
  format->materialize(master.data(), 0, kN, whole.data(), 3);
  format->materialize(master.data() + 1000, 1000, kN - 1000, slice.data(), 3);
  EXPECT_TRUE(std::equal(slice.begin(), slice.end(), whole.begin() + 1000));
}

INSTANTIATE_TEST_SUITE_P(Modes, Formats,
                         ::testing::Values(Case{PrecisionMode::fp16, 0}, Case{PrecisionMode::bf16, 0},
                                           Case{PrecisionMode::bf16_sr, 0}, Case{PrecisionMode::fp16_sr, 0},
                                           Case{PrecisionMode::bf16, 5}, Case{PrecisionMode::bf16_sr, 3},
                                           Case{PrecisionMode::fp8_rn, 0}, Case{PrecisionMode::fp8_sr, 0}),
                         [](const auto& info) {
                           std::string name = std::string(info.param.mode == PrecisionMode::fp16      ? "fp16"
                                                          : info.param.mode == PrecisionMode::bf16    ? "bf16"
                                                          : info.param.mode == PrecisionMode::bf16_sr ? "bf16_sr"
                                                          : info.param.mode == PrecisionMode::fp16_sr ? "fp16_sr"
                                                          : info.param.mode == PrecisionMode::fp8_rn  ? "fp8_rn"
                                                                                                      : "fp8_sr");
                           return info.param.analog_bits ? name + "_analog" + std::to_string(info.param.analog_bits)
                                                         : name;
                         });

// Several ranks: each takes its shard's channel maxima and `combine` makes them the whole row's, so
// the scales equal those of the whole master.
TEST(WeightFormat, ShardScalesCombinedOverRanksAreTheWholeMasters) {
  const std::vector<float> master = values(6, 0.04f);
  const std::size_t cut = 1234;  // inside a row of the first matrix
  std::vector<std::vector<float>> part(2);
  std::vector<std::unique_ptr<WeightFormat>> rank;
  for (int r = 0; r < 2; ++r)
    rank.push_back(WeightFormat::make(precision_of(PrecisionMode::fp8_rn), kSeed, {}, kMatrices));
  // Rank 0's maxima first, then rank 1's combined with them (the all-gather's max, by hand).
  std::vector<float> seen;
  rank[0]->rescale(master.data(), 0, cut, [&](float* v, std::size_t n) { seen.assign(v, v + n); });
  rank[1]->rescale(master.data() + cut, cut, kN - cut, [&](float* v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) v[i] = std::max(v[i], seen[i]);
  });
  EXPECT_EQ(rank[1]->scales()->exponent, exponents_of(master));
}

TEST(WeightFormat, TheAnalogGridOnAGpuIsRefusedByName) {
  try {
    WeightFormat::make(precision_of(PrecisionMode::bf16, 5), kSeed, Place{true, 0});
    FAIL() << "the analog grid on CUDA was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("analog_mantissa_bits"), std::string::npos) << e.what();
  }
}

TEST(WeightFormat, ChangesAreCountedPerTensorAndBlock) {
  // 6 elements in two tensors [0, 4) and [4, 6); elements 1 and 5 change, in blocks of 4.
  const uint16_t before[6] = {0x3f80, 0x3f80, 0x4000, 0x4000, 0x3f80, 0x3f80};
  const uint16_t after[6] = {0x3f80, 0x3f81, 0x4000, 0x4000, 0x3f80, 0x4000};
  SliceTensors slice{100, 6, {{100, 4, true}, {104, 2, true}}, {0, 3}};
  std::vector<int64_t> changed(4, 0);
  double delta[2] = {0, 0}, weight[2] = {0, 0};
  count_slice_changes(RoundMode::bf16_rn, Place{}, slice, before, after, 4, changed, delta, weight);
  EXPECT_EQ(changed, (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_GT(delta[0], 0.0);
  EXPECT_DOUBLE_EQ(delta[1], 1.0);  // 2 - 1
  EXPECT_DOUBLE_EQ(weight[0], 1 + 1 + 4 + 4);
  EXPECT_DOUBLE_EQ(weight[1], 2.0);
}

}  // namespace
}  // namespace unstuck::precision
