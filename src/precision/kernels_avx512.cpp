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
  template <int k>
  static I srli(I a) {
    return _mm512_srli_epi32(a, k);
  }
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
  // Round keys and the step words of one (seed, step), broadcast once per kernel call.
  struct PhiloxKey {
    PhiloxKey(uint64_t seed, uint64_t step) {
      uint32_t a = uint32_t(seed), b = uint32_t(seed >> 32);
      for (int round = 0; round < 10; ++round, a += 0x9E3779B9u, b += 0xBB67AE85u) {
        k0[round] = _mm512_set1_epi64(a);
        k1[round] = _mm512_set1_epi64(b);
      }
      step_lo = _mm512_set1_epi64(int64_t(step & 0xFFFFFFFFu));
      step_hi = _mm512_set1_epi64(int64_t(step >> 32));
    }
    I k0[10], k1[10], step_lo, step_hi;
  };

  // Philox4x32-10 on 16 consecutive blocks, 8 per register with one 32-bit word per 64-bit lane:
  // vpmuludq then yields the full 32x32 -> 64-bit product of every block without shuffles, and one
  // ternary-logic op does each three-way XOR. Only the low 32 bits of a lane are meaningful; the
  // high halves carry garbage that vpmuludq ignores and vpmovqd drops.
  static void philox16(const PhiloxKey& key, uint64_t first_block, I (&words)[4][1]) {
    I c0[2], c1[2], c2[2], c3[2];
    const I first = _mm512_set1_epi64(int64_t(first_block));
    for (int h = 0; h < 2; ++h) {
      c0[h] = _mm512_add_epi64(
          first, _mm512_setr_epi64(8 * h, 8 * h + 1, 8 * h + 2, 8 * h + 3, 8 * h + 4, 8 * h + 5, 8 * h + 6, 8 * h + 7));
      c1[h] = _mm512_srli_epi64(c0[h], 32);
      c2[h] = key.step_lo;
      c3[h] = key.step_hi;
    }
    const I m0 = _mm512_set1_epi64(0xD2511F53), m1 = _mm512_set1_epi64(0xCD9E8D57);
    for (int round = 0; round < 10; ++round) {
      const I key0 = key.k0[round], key1 = key.k1[round];
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
    }
    // Word w of blocks 0..15: the low 32 bits of the 64-bit lanes of both halves.
    const I even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    words[0][0] = _mm512_permutex2var_epi32(c0[0], even, c0[1]);
    words[1][0] = _mm512_permutex2var_epi32(c1[0], even, c1[1]);
    words[2][0] = _mm512_permutex2var_epi32(c2[0], even, c2[1]);
    words[3][0] = _mm512_permutex2var_epi32(c3[0], even, c3[1]);
  }
  // The low 16 bits of every 32-bit lane of lo, then of hi, as 32 packed 16-bit values.
  static I pack_u16(I lo, I hi) { return _mm512_permutex2var_epi16(lo, pack_index(), hi); }
  // 16-bit lane indices 0, 2, 4, ..., 62: the low halves of the 32 lanes of (lo, hi).
  static I pack_index() {
    return _mm512_setr_epi32(0x00020000, 0x00060004, 0x000A0008, 0x000E000C, 0x00120010, 0x00160014, 0x001A0018,
                             0x001E001C, 0x00220020, 0x00260024, 0x002A0028, 0x002E002C, 0x00320030, 0x00360034,
                             0x003A0038, 0x003E003C);
  }
  // The high 16 bits of every 32-bit lane of lo, then of hi.
  static I pack_hi16(I lo, I hi) {
    return _mm512_permutex2var_epi16(lo, _mm512_add_epi16(pack_index(), _mm512_set1_epi16(1)), hi);
  }
  static Mask isnan(I b) { return _mm512_fpclass_ps_mask(_mm512_castsi512_ps(b), 0x81); }  // QNaN|SNaN
  static void stream(void* p, I v) { _mm512_stream_si512(static_cast<__m512i*>(p), v); }
  static void stream_fence() { _mm_sfence(); }
  static int count_neq16(I a, I b) { return __builtin_popcount(unsigned(_mm512_cmpneq_epi16_mask(a, b))); }
  static int count_neq32(I a, I b) { return __builtin_popcount(unsigned(_mm512_cmpneq_epi32_mask(a, b))); }
};

#include "simd_kernels_impl.h"

}  // namespace

void round_avx512(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key, uint64_t index0) {
  round_dispatch<Avx512Ops>(src, dst, n, mode, key, index0);
}

uint64_t adamw_avx512(const AdamWRange& range, const AdamWScalars& s, RoundMode mode, SrKey key) {
  return adamw_dispatch<Avx512Ops>(range, s, mode, key);
}

void fp8_avx512(const float* src, uint16_t* dst, std::size_t n, uint64_t index0, float down, float up, bool stochastic,
                SrKey key) {
  SimdKernels<Avx512Ops>::fp8_range(src, dst, n, index0, down, up, stochastic, key);
}

}  // namespace unstuck::precision::cpu
