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
  template <int k>
  static I srli(I a) {
    return _mm256_srli_epi32(a, k);
  }
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
  // Round keys and the step words of one (seed, step), broadcast once per kernel call.
  struct PhiloxKey {
    PhiloxKey(uint64_t seed, uint64_t step) {
      uint32_t a = uint32_t(seed), b = uint32_t(seed >> 32);
      for (int round = 0; round < 10; ++round, a += 0x9E3779B9u, b += 0xBB67AE85u) {
        k0[round] = _mm256_set1_epi64x(a);
        k1[round] = _mm256_set1_epi64x(b);
      }
      step_lo = _mm256_set1_epi64x(int64_t(step & 0xFFFFFFFFu));
      step_hi = _mm256_set1_epi64x(int64_t(step >> 32));
    }
    I k0[10], k1[10], step_lo, step_hi;
  };

  // Philox4x32-10 on 16 consecutive blocks, 4 per register with one 32-bit word per 64-bit lane:
  // vpmuludq yields each block's full 32x32 -> 64-bit product without shuffles. Only the low 32
  // bits of a lane are meaningful; vpmuludq ignores the high halves and the final gather drops them.
  static void philox16(const PhiloxKey& key, uint64_t first_block, I (&words)[4][2]) {
    I c0[4], c1[4], c2[4], c3[4];
    const I first = _mm256_set1_epi64x(int64_t(first_block));
    for (int h = 0; h < 4; ++h) {
      c0[h] = _mm256_add_epi64(first, _mm256_setr_epi64x(4 * h, 4 * h + 1, 4 * h + 2, 4 * h + 3));
      c1[h] = _mm256_srli_epi64(c0[h], 32);
      c2[h] = key.step_lo;
      c3[h] = key.step_hi;
    }
    const I m0 = _mm256_set1_epi64x(0xD2511F53), m1 = _mm256_set1_epi64x(0xCD9E8D57);
    for (int round = 0; round < 10; ++round) {
      const I key0 = key.k0[round], key1 = key.k1[round];
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
    }
    // Word w of blocks 8*part .. 8*part+7: the low 32 bits of the 64-bit lanes of two registers.
    // shufps picks them as blocks (0,1,4,5 | 2,3,6,7); the 64-bit permute restores the order.
    auto gather = [](I a, I b) {
      const __m256 s = _mm256_shuffle_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b), 0x88);
      return _mm256_permute4x64_epi64(_mm256_castps_si256(s), 0xD8);
    };
    for (int part = 0; part < 2; ++part) {
      words[0][part] = gather(c0[2 * part], c0[2 * part + 1]);
      words[1][part] = gather(c1[2 * part], c1[2 * part + 1]);
      words[2][part] = gather(c2[2 * part], c2[2 * part + 1]);
      words[3][part] = gather(c3[2 * part], c3[2 * part + 1]);
    }
  }
  // The low 16 bits of every 32-bit lane of lo, then of hi, as 16 packed 16-bit values (lanes
  // hold values below 2^16, so the saturating pack is exact; the permute undoes its lane split).
  static I pack_u16(I lo, I hi) { return _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xD8); }
  static I pack_hi16(I lo, I hi) { return pack_u16(srli<16>(lo), srli<16>(hi)); }
  static Mask isnan(I b) {
    const __m256 x = _mm256_castsi256_ps(b);
    return _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static void stream(void* p, I v) { _mm256_stream_si256(static_cast<__m256i*>(p), v); }
  static void stream_fence() { _mm_sfence(); }
  static int count_neq16(I a, I b) {
    return (32 - __builtin_popcount(unsigned(_mm256_movemask_epi8(_mm256_cmpeq_epi16(a, b))))) / 2;
  }
  static int count_neq32(I a, I b) {
    return W - __builtin_popcount(unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a, b)))));
  }
};

#include "simd_kernels_impl.h"

}  // namespace

void round_avx2(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key, uint64_t index0) {
  round_dispatch<Avx2Ops>(src, dst, n, mode, key, index0);
}

uint64_t adamw_avx2(const AdamWRange& range, const AdamWScalars& s, RoundMode mode, SrKey key) {
  return adamw_dispatch<Avx2Ops>(range, s, mode, key);
}

void fp8_avx2(const float* src, uint16_t* dst, std::size_t n, uint64_t index0, float down, float up, bool stochastic,
              SrKey key) {
  SimdKernels<Avx2Ops>::fp8_range(src, dst, n, index0, down, up, stochastic, key);
}

}  // namespace unstuck::precision::cpu
