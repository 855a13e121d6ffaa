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
  // 32x32 -> 64-bit products of every lane, split into high and low words.
  static void mulhilo(I a, uint32_t mul, I& hi, I& lo) {
    const I m = set1(mul);
    const I even = _mm256_mul_epu32(a, m);
    const I odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
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
