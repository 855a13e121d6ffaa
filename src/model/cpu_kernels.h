// CPU kernels of the model's no-gradient path (FP32; decode attention also BF16) (rollouts,
// measurement forwards), each one pass where libtorch runs several ops: decode attention (one query
// per row against its KV cache, bound by reading the cache), RMSNorm and rotary embedding.
// Torch-free; src/model/llama.cpp calls them on tensors' buffers. Sums run over 16 fixed lanes, so
// the scalar, AVX2 and AVX-512 clones the compiler makes of each kernel give the same bits.
#pragma once

#include <cstdint>

namespace unstuck::model {

struct DecodeAttentionShape {
  int64_t heads = 0;         // H query heads per row
  int64_t kv_heads = 0;      // G key/value heads per row (H % G == 0; query head h reads G-group h / (H/G))
  int64_t head_dim = 0;      // hd
  int64_t slots = 0;         // A slots per (row, KV head) in the cache buffers
  int64_t filled = 0;        // L <= A: slots read; a hidden slot among them has bias -inf
  int64_t q_row_stride = 0;  // elements between rows' queries (the heads of a row are hd apart)
};

// For rows b and KV heads g with index b * G + g in [first, last):
//   out[b, h, :] = sum_c softmax_c(scale * q[b, h] . k[b, g, c] + bias[b, c]) * v[b, g, c]   (c < L)
// q: row b, head h at q + b * q_row_stride + h * hd; k, v: (B, G, A, hd) contiguous; bias: (B, A),
// 0 for a visible slot, -inf for a hidden one; out: (B, H, hd) contiguous. exp is Cephes' expf
// polynomial. A row whose slots are all hidden gets zeros. Hidden slots are not read.
void decode_attention_f32(const float* q, const float* k, const float* v, const float* bias, float* out,
                          const DecodeAttentionShape& shape, float scale, int64_t first, int64_t last);

// The same in BF16 (bit patterns): q, k, v, bias and out hold BF16 values; the kernel computes in FP32
// and rounds to BF16 where libtorch's batched BF16 products round (the scaled query, each score,
// each probability, the output), as the model's BF16 decode did before this kernel.
void decode_attention_bf16(const uint16_t* q, const uint16_t* k, const uint16_t* v, const uint16_t* bias, uint16_t* out,
                           const DecodeAttentionShape& shape, float scale, int64_t first, int64_t last);

// The scalar reference the tests compare with: the same formula with double accumulation and std::exp.
void decode_attention_reference(const float* q, const float* k, const float* v, const float* bias, float* out,
                                const DecodeAttentionShape& shape, float scale, int64_t batch);

// out[r, :] = weight * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)) for rows r in [first, last) of the
// (rows, dim) x and out (contiguous; out may be x), as Hugging Face's LlamaRMSNorm in FP32.
void rms_norm_f32(const float* x, const float* weight, float* out, int64_t dim, float eps, int64_t first, int64_t last);

// A layer's residual add and the RMSNorm after it in one pass: for rows r in [first, last) of the
// (rows, dim) buffers, sum[r] = x[r] + y[r] rounded to the dtype, and
//   out[r] = round(weight * round(sum[r] * inv)),  inv = 1 / sqrt(mean(sum[r]^2) + eps) in FP32,
// Hugging Face's LlamaRMSNorm with its two roundings (the normalized value cast back to the dtype,
// then the weight's product; none in FP32). sum may be x. The sum's bits equal libtorch's add; the
// mean runs over 16 lanes, so out is within 1e-6 relative (FP32) or 1 BF16 ulp of libtorch's ops.
void add_rms_norm_f32(const float* x, const float* y, const float* weight, float* sum, float* out, int64_t dim,
                      float eps, int64_t first, int64_t last);
void add_rms_norm_bf16(const uint16_t* x, const uint16_t* y, const uint16_t* weight, uint16_t* sum, uint16_t* out,
                       int64_t dim, float eps, int64_t first, int64_t last);

// The MLP's activation: rows of gate_up hold 2F values (the gate's F, then the up projection's F);
//   out[r, f] = round(round(silu(g)) * u),  silu(g) = g / (1 + exp(-g)) in FP32,
// as libtorch's silu and product in the dtype (rows [first, last), out rows of F). exp is the Cephes
// polynomial (lane_math.h): within 2 FP32 ulp of libtorch's Sleef exp, or 1 BF16 ulp after rounding.
void silu_mul_f32(const float* gate_up, float* out, int64_t F, int64_t first, int64_t last);
void silu_mul_bf16(const uint16_t* gate_up, uint16_t* out, int64_t F, int64_t first, int64_t last);

// Rotary embedding in place, as `x * cos + rotate_half(x) * sin` (rotate_half(x) = [-x2, x1]) with
// the same two products and one sum per element, so the bits equal libtorch's elementwise ops. x holds
// `heads` vectors of hd values per row (the row's first heads * hd values; rows row_stride apart);
// cos, sin: (rows, hd) contiguous, shared by the row's heads. Rows [first, last).
void rope_f32(float* x, const float* cos, const float* sin, int64_t heads, int64_t hd, int64_t row_stride,
              int64_t first, int64_t last);

}  // namespace unstuck::model
