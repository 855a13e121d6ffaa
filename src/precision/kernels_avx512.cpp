// AVX-512 CPU kernels: the traits that map SimdKernels' vector operations onto 16-lane AVX-512
// intrinsics. Compiled with -mavx512f/bw/vl/dq (src/CMakeLists.txt); called only when the CPU has them.
#include <immintrin.h>

#include "cpu_kernels.h"

namespace unstuck::precision::cpu {
namespace {

struct Avx512Ops {
  static constexpr int W = 16;
  using F = __m512;
  using I = __m512i;
  using Mask = __mmask16;

  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static void store(void* p, I v) { _mm512_storeu_si512(p, v); }
  static F loadf(const float* p) { return _mm512_loadu_ps(p); }
  static void storef(float* p, F v) { _mm512_storeu_ps(p, v); }
  static I set1(uint32_t x) { return _mm512_set1_epi32(int(x)); }
  static F set1f(float x) { return _mm512_set1_ps(x); }
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I band(I a, I b) { return _mm512_and_si512(a, b); }
  static I bor(I a, I b) { return _mm512_or_si512(a, b); }
  static I bxor(I a, I b) { return _mm512_xor_si512(a, b); }
  template <int k> static I srli(I a) { return _mm512_srli_epi32(a, k); }
  static Mask cmpgt(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }  // signed
  static I blend(Mask m, I if_false, I if_true) { return _mm512_mask_blend_epi32(m, if_false, if_true); }
  static F castf(I a) { return _mm512_castsi512_ps(a); }
  static I casti(F a) { return _mm512_castps_si512(a); }
  static F addf(F a, F b) { return _mm512_add_ps(a, b); }
  static F subf(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mulf(F a, F b) { return _mm512_mul_ps(a, b); }
  static F divf(F a, F b) { return _mm512_div_ps(a, b); }
  static F sqrtf(F a) { return _mm512_sqrt_ps(a); }
  static I cvtt(F a) { return _mm512_cvttps_epi32(a); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  // Philox4x32-10 on 16 consecutive blocks, 8 per register with one 32-bit word per 64-bit lane:
  // vpmuludq then yields the full 32x32 -> 64-bit product of every block without shuffles, and one
  // ternary-logic op does each three-way XOR. Only the low 32 bits of a lane are meaningful; the
  // high halves carry garbage that vpmuludq ignores and vpmovqd drops.
  static void philox16(uint64_t seed, uint64_t step, uint64_t first_block, uint32_t* out) {
    alignas(64) uint64_t blocks[16];
    for (int b = 0; b < 16; ++b) blocks[b] = first_block + uint64_t(b);
    I c0[2], c1[2], c2[2], c3[2];
    for (int h = 0; h < 2; ++h) {
      c0[h] = _mm512_load_si512(blocks + 8 * h);
      c1[h] = _mm512_srli_epi64(c0[h], 32);
      c2[h] = _mm512_set1_epi64(int64_t(step & 0xFFFFFFFFu));
      c3[h] = _mm512_set1_epi64(int64_t(step >> 32));
    }
    const I m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int round = 0; round < 10; ++round) {
      const I key0 = _mm512_set1_epi64(k0), key1 = _mm512_set1_epi64(k1);
      for (int h = 0; h < 2; ++h) {
        const I p0 = _mm512_mul_epu32(c0[h], m0);
        const I p1 = _mm512_mul_epu32(c2[h], m1);
        const I n0 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32), c1[h], key0, 0x96);
        const I n2 = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32), c3[h], key1, 0x96);
        c1[h] = p1;
        c3[h] = p0;
        c0[h] = n0;
        c2[h] = n2;
      }
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    for (int h = 0; h < 2; ++h) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 0 * 16 + 8 * h), _mm512_cvtepi64_epi32(c0[h]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 1 * 16 + 8 * h), _mm512_cvtepi64_epi32(c1[h]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * 16 + 8 * h), _mm512_cvtepi64_epi32(c2[h]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 3 * 16 + 8 * h), _mm512_cvtepi64_epi32(c3[h]));
    }
  }
  static I load_u16(const uint16_t* p) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static void store_u16(uint16_t* p, I v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
  }
  static int count_neq(I a, I b) { return __builtin_popcount(unsigned(_mm512_cmpneq_epi32_mask(a, b))); }
};

#include "simd_kernels_impl.h"

}  // namespace

void round_avx512(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key,
                  uint64_t index0) {
  round_dispatch<Avx512Ops>(src, dst, n, mode, key, index0);
}

uint64_t adamw_avx512(const AdamWRange& range, const AdamWScalars& s, RoundMode mode, SrKey key) {
  return adamw_dispatch<Avx512Ops>(range, s, mode, key);
}

}  // namespace unstuck::precision::cpu
