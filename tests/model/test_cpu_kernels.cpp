// The CPU kernels of the no-gradient path (cpu_kernels.h) against their references: FP32 decode
// attention against the scalar double-precision formula (GQA and MHA, head sizes with and without a
// compiled specialization, hidden slots, a fully hidden row, strided queries), BF16 decode attention
// against libtorch's batched BF16 products, both with the same bits however the rows are split among
// threads; RMSNorm against Hugging Face's formula in libtorch ops;
// rotary embedding bit-identical to libtorch's `x * cos + rotate_half(x) * sin`; the fused residual add
// + RMSNorm and SiLU x up against libtorch's ops in FP32 and BF16 (the sum bit for bit, the rest within
// the header's ulp bounds, and in BF16 on at most 1% of the elements).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#if defined(UNSTUCK_HAVE_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

#include "model/cpu_kernels.h"
#include "model/layer_kernels.h"

namespace unstuck::model {
namespace {

struct AttentionCase {
  int64_t B, H, G, hd, A, L, q_extra;  // q_extra: values between a row's last head and the next row
};

// Max |a - b| / max |b|.
double rel_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
}

class DecodeAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(DecodeAttention, MatchesTheScalarReferenceAndIgnoresTheThreadSplit) {
  const AttentionCase c = GetParam();
  torch::manual_seed(3);
  const torch::Tensor q = torch::randn({c.B, c.H * c.hd + c.q_extra});
  const torch::Tensor k = torch::randn({c.B, c.G, c.A, c.hd}), v = torch::randn({c.B, c.G, c.A, c.hd});
  torch::Tensor bias = torch::zeros({c.B, c.A});
  bias.masked_fill_(torch::rand({c.B, c.A}) < 0.3, -INFINITY);    // holes among the filled slots
  bias.narrow(1, c.L, c.A - c.L).fill_(-INFINITY);                // unfilled slots
  bias[0].fill_(-INFINITY);                                       // row 0: nothing visible
  bias[1].fill_(0.0).narrow(0, c.L, c.A - c.L).fill_(-INFINITY);  // row 1: every filled slot visible
  // Unfilled slots hold NaN: a kernel that read them would spread it.
  k.narrow(2, c.L, c.A - c.L).fill_(std::numeric_limits<float>::quiet_NaN());
  v.narrow(2, c.L, c.A - c.L).fill_(std::numeric_limits<float>::quiet_NaN());
  const DecodeAttentionShape shape{c.H, c.G, c.hd, c.A, c.L, c.H * c.hd + c.q_extra};
  const float scale = float(1.0 / std::sqrt(double(c.hd)));
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>(),
              *bp = bias.data_ptr<float>();

  torch::Tensor out = torch::full({c.B, c.H, c.hd}, 7.0f), ref = torch::empty({c.B, c.H, c.hd});
  decode_attention_f32(qp, kp, vp, bp, out.data_ptr<float>(), shape, scale, 0, c.B * c.G);
  decode_attention_reference(qp, kp, vp, bp, ref.data_ptr<float>(), shape, scale, c.B);
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  EXPECT_TRUE(torch::equal(out[0], torch::zeros({c.H, c.hd})));
  EXPECT_LT(rel_error(out, ref), 2e-6);

  torch::Tensor split = torch::empty_like(out);  // three uneven chunks, as threads would take them
  const int64_t n = c.B * c.G, cuts[4] = {0, 1, n / 2 + 1, n};
  for (int i = 0; i < 3; ++i)
    decode_attention_f32(qp, kp, vp, bp, split.data_ptr<float>(), shape, scale, cuts[i], cuts[i + 1]);
  EXPECT_TRUE(torch::equal(split, out));
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAttention,
                         ::testing::Values(AttentionCase{5, 4, 2, 32, 40, 37, 0},   // GQA, strided rows below
                                           AttentionCase{4, 4, 4, 64, 24, 17, 96},  // MHA, queries inside qkv
                                           AttentionCase{3, 8, 2, 128, 33, 33, 0},  // full cache
                                           AttentionCase{3, 6, 3, 40, 20, 9, 8},    // no specialization, lane tail
                                           AttentionCase{2, 2, 1, 16, 3, 2, 0}));   // fewer slots than lanes

// BF16: the kernel against libtorch's batched BF16 products it replaces (the query scaled in BF16,
// scores as BF16 products plus the bias, an FP32 softmax cast to BF16, the weighted values), which
// sum in another order: within 1% of the largest output (a few BF16 ulps; measured here: identical
// in all five shapes), and the same bits for any split of the rows.
TEST_P(DecodeAttention, Bf16MatchesTheBatchedProducts) {
  const AttentionCase c = GetParam();
  torch::manual_seed(6);
  const auto bf16 = torch::kBFloat16;
  const torch::Tensor q = torch::randn({c.B, c.H * c.hd + c.q_extra}).to(bf16);
  const torch::Tensor k = torch::randn({c.B, c.G, c.A, c.hd}).to(bf16),
                      v = torch::randn({c.B, c.G, c.A, c.hd}).to(bf16);
  torch::Tensor bias = torch::zeros({c.B, c.A});
  bias.masked_fill_(torch::rand({c.B, c.A}) < 0.3, -INFINITY);
  bias.narrow(1, c.L, c.A - c.L).fill_(-INFINITY);
  bias[1].fill_(0.0).narrow(0, c.L, c.A - c.L).fill_(-INFINITY);
  bias = bias.to(bf16);
  const double scale = 1.0 / std::sqrt(double(c.hd));
  // The batched products over the filled slots (B, G, H/G, hd) x (B, G, hd, L).
  const torch::Tensor qg = q.narrow(1, 0, c.H * c.hd).reshape({c.B, c.G, c.H / c.G, c.hd}) * scale;
  const torch::Tensor kf = k.narrow(2, 0, c.L), vf = v.narrow(2, 0, c.L);
  const torch::Tensor scores = at::matmul(qg, kf.transpose(2, 3)) + bias.narrow(1, 0, c.L).view({c.B, 1, 1, c.L});
  const torch::Tensor probs = at::softmax(scores, -1, torch::kFloat32).to(bf16);
  const torch::Tensor ref = at::matmul(probs, vf).reshape({c.B, c.H, c.hd});
  const DecodeAttentionShape shape{c.H, c.G, c.hd, c.A, c.L, c.H * c.hd + c.q_extra};
  const auto bits = [](const torch::Tensor& t) {
    return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
  };
  torch::Tensor out = torch::empty({c.B, c.H, c.hd}, bf16), split = torch::empty_like(out);
  decode_attention_bf16(bits(q), bits(k), bits(v), bits(bias),
                        reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>()), shape, float(scale), 0, c.B * c.G);
  EXPECT_LT(rel_error(out.to(torch::kFloat32), ref.to(torch::kFloat32)), 1e-2);
  const int64_t n = c.B * c.G, cuts[4] = {0, 1, n / 2 + 1, n};
  for (int i = 0; i < 3; ++i)
    decode_attention_bf16(bits(q), bits(k), bits(v), bits(bias),
                          reinterpret_cast<uint16_t*>(split.data_ptr<at::BFloat16>()), shape, float(scale), cuts[i],
                          cuts[i + 1]);
  EXPECT_TRUE(torch::equal(split, out));
}

TEST(RmsNormKernel, MatchesHuggingFacesFormula) {
  torch::manual_seed(4);
  for (const int64_t D : {64, 896, 37}) {
    const torch::Tensor x = torch::randn({6, D}) * 3, w = torch::randn({D});
    const torch::Tensor ref = w * (x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6));
    torch::Tensor out = torch::empty_like(x);
    rms_norm_f32(x.data_ptr<float>(), w.data_ptr<float>(), out.data_ptr<float>(), D, 1e-6f, 0, 6);
    EXPECT_LT(rel_error(out, ref), 1e-6) << D;
    torch::Tensor in_place = x.clone();  // out may be x
    rms_norm_f32(in_place.data_ptr<float>(), w.data_ptr<float>(), in_place.data_ptr<float>(), D, 1e-6f, 0, 6);
    EXPECT_TRUE(torch::equal(in_place, out)) << D;
  }
}

TEST(RopeKernel, EqualsTheLibtorchOpsBitForBit) {
  torch::manual_seed(5);
  const int64_t rows = 7, heads = 3, hd = 32, stride = heads * hd + 64;  // a row also holds 64 other values
  const torch::Tensor x = torch::randn({rows, stride});
  const torch::Tensor angles = torch::rand({rows, hd / 2}) * 50;
  const torch::Tensor emb = torch::cat({angles, angles}, -1);
  const torch::Tensor cos = emb.cos(), sin = emb.sin();  // (rows, hd)
  const torch::Tensor heads_view = x.narrow(1, 0, heads * hd).view({rows, heads, hd});
  const torch::Tensor rotated_half =
      torch::cat({-heads_view.narrow(-1, hd / 2, hd / 2), heads_view.narrow(-1, 0, hd / 2)}, -1);
  const torch::Tensor ref = heads_view * cos.unsqueeze(1) + rotated_half * sin.unsqueeze(1);
  torch::Tensor out = x.clone();
  rope_f32(out.data_ptr<float>(), cos.data_ptr<float>(), sin.data_ptr<float>(), heads, hd, stride, 0, rows);
  EXPECT_TRUE(torch::equal(out.narrow(1, 0, heads * hd).view({rows, heads, hd}), ref));
  EXPECT_TRUE(torch::equal(out.narrow(1, heads * hd, 64), x.narrow(1, heads * hd, 64)));  // untouched
}

// Elements of `got` (BF16) that differ from `want`: none by more than one BF16 ulp of want, and at
// most 1% of them at all.
void expect_within_one_bf16_ulp(const torch::Tensor& got, const torch::Tensor& want) {
  const torch::Tensor g = got.to(torch::kFloat32).flatten(), w = want.to(torch::kFloat32).flatten();
  int64_t differing = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float a = g[i].item<float>(), b = w[i].item<float>();
    if (a == b) continue;
    ++differing;
    const float ulp = b == 0 ? 1e-38f : std::ldexp(1.0f, std::ilogb(b) - 7);  // BF16 keeps 8 significant bits
    EXPECT_LE(std::fabs(a - b), ulp) << "element " << i << ": " << a << " against " << b;
  }
  EXPECT_LE(differing * 100, w.numel()) << differing << " of " << w.numel() << " differ";
}

uint16_t* bf16_bits(const torch::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>()); }

TEST(AddRmsNormKernel, SumsAsLibtorchAndNormalizesAsHuggingFace) {
  torch::manual_seed(6);
  for (const int64_t D : {896, 37}) {
    const torch::Tensor x = torch::randn({6, D}) * 3, y = torch::randn({6, D}), w = torch::randn({D});
    const torch::Tensor sum = x + y, ref = w * (sum * torch::rsqrt(sum.pow(2).mean(-1, true) + 1e-6));
    torch::Tensor got_sum = x.clone(), out = torch::empty_like(x);  // the sum in place of x
    add_rms_norm_f32(got_sum.data_ptr<float>(), y.data_ptr<float>(), w.data_ptr<float>(), got_sum.data_ptr<float>(),
                     out.data_ptr<float>(), D, 1e-6f, 0, 6);
    EXPECT_TRUE(torch::equal(got_sum, sum)) << D;
    EXPECT_LT(rel_error(out, ref), 1e-6) << D;
    // BF16: the add rounds once, then Hugging Face's two roundings.
    const torch::Tensor xb = x.to(torch::kBFloat16), yb = y.to(torch::kBFloat16), wb = w.to(torch::kBFloat16);
    const torch::Tensor sb = xb + yb, h = sb.to(torch::kFloat32);
    const torch::Tensor refb = wb * (h * torch::rsqrt(h.pow(2).mean(-1, true) + 1e-6)).to(torch::kBFloat16);
    torch::Tensor sum_b = torch::empty_like(xb), out_b = torch::empty_like(xb);
    add_rms_norm_bf16(bf16_bits(xb), bf16_bits(yb), bf16_bits(wb), bf16_bits(sum_b), bf16_bits(out_b), D, 1e-6f, 0, 3);
    add_rms_norm_bf16(bf16_bits(xb), bf16_bits(yb), bf16_bits(wb), bf16_bits(sum_b), bf16_bits(out_b), D, 1e-6f, 3, 6);
    EXPECT_TRUE(torch::equal(sum_b, sb)) << D;
    expect_within_one_bf16_ulp(out_b, refb);
  }
}

TEST(SiluMulKernel, MatchesLibtorchsSiluTimesUpOverTheWholeRange) {
  torch::manual_seed(7);
  const int64_t rows = 5, F = 400;
  torch::Tensor gate_up = torch::randn({rows, 2 * F}) * 4;
  // The gate's extremes: exp(-g) overflowing to inf (silu -0), near the float maximum, and vanishing.
  const std::vector<float> extremes = {-100, -88.8f, -88.5f, -88, -80, -20, 0, 20, 80, 88, 100};
  for (std::size_t i = 0; i < extremes.size(); ++i) gate_up[0][int64_t(i)] = extremes[i];
  const torch::Tensor g = gate_up.narrow(1, 0, F), u = gate_up.narrow(1, F, F);
  const torch::Tensor ref = torch::silu(g) * u;
  torch::Tensor out = torch::empty({rows, F});
  silu_mul_f32(gate_up.data_ptr<float>(), out.data_ptr<float>(), F, 0, rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t f = 0; f < F; ++f) {
      const float a = out[r][f].item<float>(), b = ref[r][f].item<float>();
      const float two_ulp = 2 * std::fabs(std::nextafter(b, INFINITY) - b);
      EXPECT_LE(std::fabs(a - b), two_ulp) << "row " << r << " gate " << g[r][f].item<float>();
    }
  const torch::Tensor gu_b = gate_up.to(torch::kBFloat16);
  const torch::Tensor ref_b = torch::silu(gu_b.narrow(1, 0, F)) * gu_b.narrow(1, F, F);
  torch::Tensor out_b = torch::empty({rows, F}, torch::kBFloat16);
  silu_mul_bf16(bf16_bits(gu_b), bf16_bits(out_b), F, 0, rows);
  expect_within_one_bf16_ulp(out_b, ref_b);
}

// The CUDA twins (layer_kernels_cuda.cu) give the CPU kernels' bits, FP32 and BF16, Qwen2.5-0.5B's
// width and an odd one, with the gate's extremes.
TEST(LayerKernels, CudaTwinsGiveTheCpuKernelsBits) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
#if defined(UNSTUCK_HAVE_CUDA)
  torch::manual_seed(8);
  void* stream = c10::cuda::getCurrentCUDAStream().stream();
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const bool bf16 = dtype == torch::kBFloat16;
    for (const int64_t D : {896, 37}) {
      const int64_t rows = 9;
      const torch::Tensor x = (torch::randn({rows, D}) * 3).to(dtype), y = torch::randn({rows, D}).to(dtype);
      const torch::Tensor w = torch::randn({D}).to(dtype);
      torch::Tensor sum = torch::empty_like(x), out = torch::empty_like(x);
      const torch::Tensor xd = x.cuda(), yd = y.cuda(), wd = w.cuda();
      torch::Tensor sum_d = torch::empty_like(xd), out_d = torch::empty_like(xd);
      if (bf16) {
        add_rms_norm_bf16(bf16_bits(x), bf16_bits(y), bf16_bits(w), bf16_bits(sum), bf16_bits(out), D, 1e-6f, 0, rows);
        add_rms_norm_bf16_cuda(bf16_bits(xd), bf16_bits(yd), bf16_bits(wd), bf16_bits(sum_d), bf16_bits(out_d), rows, D,
                               1e-6f, stream);
      } else {
        add_rms_norm_f32(x.data_ptr<float>(), y.data_ptr<float>(), w.data_ptr<float>(), sum.data_ptr<float>(),
                         out.data_ptr<float>(), D, 1e-6f, 0, rows);
        add_rms_norm_f32_cuda(xd.data_ptr<float>(), yd.data_ptr<float>(), wd.data_ptr<float>(), sum_d.data_ptr<float>(),
                              out_d.data_ptr<float>(), rows, D, 1e-6f, stream);
      }
      EXPECT_TRUE(torch::equal(sum_d.cpu(), sum)) << D << " " << c10::toString(dtype);
      EXPECT_TRUE(torch::equal(out_d.cpu(), out)) << D << " " << c10::toString(dtype);
    }
    const int64_t F = 4864;
    torch::Tensor gate_up = torch::randn({5, 2 * F}) * 4;
    const std::vector<float> extremes = {-100, -88.8f, -88.5f, -88, -80, -20, 0, 20, 80, 88, 100};
    for (std::size_t i = 0; i < extremes.size(); ++i) gate_up[0][int64_t(i)] = extremes[i];
    gate_up = gate_up.to(dtype);
    torch::Tensor act = torch::empty({5, F}, dtype);
    const torch::Tensor gu_d = gate_up.cuda();
    torch::Tensor act_d = torch::empty({5, F}, gu_d.options());
    if (bf16) {
      silu_mul_bf16(bf16_bits(gate_up), bf16_bits(act), F, 0, 5);
      silu_mul_bf16_cuda(bf16_bits(gu_d), bf16_bits(act_d), 5, F, stream);
    } else {
      silu_mul_f32(gate_up.data_ptr<float>(), act.data_ptr<float>(), F, 0, 5);
      silu_mul_f32_cuda(gu_d.data_ptr<float>(), act_d.data_ptr<float>(), 5, F, stream);
    }
    EXPECT_TRUE(torch::equal(act_d.cpu(), act)) << c10::toString(dtype);
  }
#endif
}

}  // namespace
}  // namespace unstuck::model
