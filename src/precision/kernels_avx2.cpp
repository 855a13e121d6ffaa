// AVX2 CPU kernels: the traits that map SimdKernels' vector operations onto 8-lane AVX2 intrinsics.
// Compiled with -mavx2 -mf16c (src/CMakeLists.txt); called only when the CPU reports AVX2.
#include <immintrin.h>

#include "cpu_kernels.h"

namespace unstuck::precision::cpu {
namespace {

struct Avx2Ops {
  static constexpr int W = 8;
  using F = __m256;
  using I = __m256i;
  using Mask = __m256i;

  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static void store(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  static F loadf(const float* p) { return _mm256_loadu_ps(p); }
  static void storef(float* p, F v) { _mm256_storeu_ps(p, v); }
  static I set1(uint32_t x) { return _mm256_set1_epi32(int(x)); }
  static F set1f(float x) { return _mm256_set1_ps(x); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I band(I a, I b) { return _mm256_and_si256(a, b); }
  static I bor(I a, I b) { return _mm256_or_si256(a, b); }
  static I bxor(I a, I b) { return _mm256_xor_si256(a, b); }
  template <int k> static I srli(I a) { return _mm256_srli_epi32(a, k); }
  static Mask cmpgt(I a, I b) { return _mm256_cmpgt_epi32(a, b); }  // signed
  static I blend(Mask m, I if_false, I if_true) { return _mm256_blendv_epi8(if_false, if_true, m); }
  static F castf(I a) { return _mm256_castsi256_ps(a); }
  static I casti(F a) { return _mm256_castps_si256(a); }
  static F addf(F a, F b) { return _mm256_add_ps(a, b); }
  static F subf(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mulf(F a, F b) { return _mm256_mul_ps(a, b); }
  static F divf(F a, F b) { return _mm256_div_ps(a, b); }
  static F sqrtf(F a) { return _mm256_sqrt_ps(a); }
  static I cvtt(F a) { return _mm256_cvttps_epi32(a); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  // Philox4x32-10 on 16 consecutive blocks, 4 per register with one 32-bit word per 64-bit lane:
  // vpmuludq yields each block's full 32x32 -> 64-bit product without shuffles. Only the low 32
  // bits of a lane are meaningful; vpmuludq ignores the high halves and the final gather drops them.
  static void philox16(uint64_t seed, uint64_t step, uint64_t first_block, uint32_t* out) {
    alignas(32) uint64_t blocks[16];
    for (int b = 0; b < 16; ++b) blocks[b] = first_block + uint64_t(b);
    I c0[4], c1[4], c2[4], c3[4];
    for (int h = 0; h < 4; ++h) {
      c0[h] = _mm256_load_si256(reinterpret_cast<const __m256i*>(blocks + 4 * h));
      c1[h] = _mm256_srli_epi64(c0[h], 32);
      c2[h] = _mm256_set1_epi64x(int64_t(step & 0xFFFFFFFFu));
      c3[h] = _mm256_set1_epi64x(int64_t(step >> 32));
    }
    const I m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const I key0 = _mm256_set1_epi64x(k0), key1 = _mm256_set1_epi64x(k1);
      for (int h = 0; h < 4; ++h) {
        const I p0 = _mm256_mul_epu32(c0[h], m0);
        const I p1 = _mm256_mul_epu32(c2[h], m1);
        const I n0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[h]), key0);
        const I n2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[h]), key1);
        c1[h] = p1;
        c3[h] = p0;
        c0[h] = n0;
        c2[h] = n2;
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const I low_words = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int h = 0; h < 4; ++h) {
      const I* words[4] = {&c0[h], &c1[h], &c2[h], &c3[h]};
      for (int w = 0; w < 4; ++w) {
        const I packed = _mm256_permutevar8x32_epi32(*words[w], low_words);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16 * w + 4 * h), _mm256_castsi256_si128(packed));
      }
    }
  }
  static I load_u16(const uint16_t* p) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static void store_u16(uint16_t* p, I v) {  // lanes hold values < 2^16, so packus is exact
    const I packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  static int count_neq(I a, I b) {
    return W - __builtin_popcount(unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)))));
  }
};

#include "simd_kernels_impl.h"

}  // namespace

void round_avx2(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key,
                uint64_t index0) {
  round_dispatch<Avx2Ops>(src, dst, n, mode, key, index0);
}

uint64_t adamw_avx2(const AdamWRange& range, const AdamWScalars& s, RoundMode mode, SrKey key) {
  return adamw_dispatch<Avx2Ops>(range, s, mode, key);
}

}  // namespace unstuck::precision::cpu
