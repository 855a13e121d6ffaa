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
  // 32x32 -> 64-bit products of every lane, split into high and low words.
  static void mulhilo(I a, uint32_t mul, I& hi, I& lo) {
    const I m = set1(mul);
    const I even = _mm512_mul_epu32(a, m);
    const I odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
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
