// The CPU kernels of the no-gradient path (cpu_kernels.h) against their references: FP32 decode
// attention against the scalar double-precision formula (GQA and MHA, head sizes with and without a
// compiled specialization, hidden slots, a fully hidden row, strided queries), BF16 decode attention
// against libtorch's batched BF16 products, both with the same bits however the rows are split among
// threads; RMSNorm against Hugging Face's formula in libtorch ops;
// rotary embedding bit-identical to libtorch's `x * cos + rotate_half(x) * sin`.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "model/cpu_kernels.h"

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

}  // namespace
}  // namespace unstuck::model
