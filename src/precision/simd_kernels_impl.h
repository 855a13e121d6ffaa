// Private: the SIMD rounding and fused-AdamW loops, written once over a small traits type V
// (Avx2Ops in kernels_avx2.cpp, Avx512Ops in kernels_avx512.cpp) that wraps the intrinsics. Each
// vector lane performs exactly the arithmetic of the scalar functions in round_math.h.
//
// Only include from an ISA translation unit, after cpu_kernels.h, inside
// `namespace unstuck::cpu { namespace {`: everything gets internal linkage. Nothing here
// may call the shared inline functions of round_math.h: a copy of them compiled with AVX-512 flags
// could be picked by the linker for scalar callers. Heads and tails go to the scalar kernels instead.

template <class V>
struct SimdKernels {
  using F = typename V::F;
  using I = typename V::I;
  static constexpr int W = V::W;
  static constexpr std::size_t kTile = 128;  // a BF16 SR tile and two FP16 SR tiles

  // Philox4x32-10 on blocks first_block .. first_block + 15 is V::philox16: word w of block b goes to
  // out[16*w + b], which is exactly the element order of the SR tile layout (round_math.h).
  static void philox16(uint64_t seed, uint64_t step, uint64_t first_block, uint32_t* out) {
    V::philox16(seed, step, first_block, out);
  }

  // Random bits of the 128 elements starting at global index g (a multiple of 128).
  template <RoundMode M>
  static void tile_bits(SrKey key, uint64_t g, uint32_t* rnd) {
    if constexpr (M == RoundMode::fp16_sr) {
      philox16(key.seed, key.step, g / 64 * 16, rnd);
      philox16(key.seed, key.step, g / 64 * 16 + 16, rnd + 64);
    } else if constexpr (M == RoundMode::bf16_sr) {
      alignas(64) uint32_t words[64];
      philox16(key.seed, key.step, g / 128 * 16, words);
      for (int k = 0; k < 8; ++k)
        for (int part = 0; part < 16 / W; ++part) {
          const I w = V::load(words + 16 * (k >> 1) + part * W);
          V::store(rnd + 16 * k + part * W,
                   (k & 1) ? V::template srli<16>(w) : V::band(w, V::set1(0xFFFFu)));
        }
    }
  }

  // One vector of round_math.h's bf16_rn / bf16_sr / fp16_rn / fp16_sr (lanes: FP32 bits in,
  // 16-bit patterns out; fp32 mode passes the bits through).
  template <RoundMode M>
  static I round_vec(I b, I r) {
    if constexpr (M == RoundMode::fp32) {
      return b;
    } else {
      const I a = V::band(b, V::set1(0x7FFFFFFFu));
      const auto nan = V::cmpgt(a, V::set1(0x7F800000u));
      if constexpr (M == RoundMode::bf16_rn) {
        const I bias = V::add(V::set1(0x7FFFu), V::band(V::template srli<16>(b), V::set1(1u)));
        return V::blend(nan, V::template srli<16>(V::add(b, bias)), V::set1(0x7FC0u));
      } else if constexpr (M == RoundMode::bf16_sr) {
        return V::blend(nan, V::template srli<16>(V::add(b, r)), V::set1(0x7FC0u));
      } else {
        const I sign = V::band(V::template srli<16>(b), V::set1(0x8000u));
        const I rebiased = V::sub(a, V::set1(112u << 23));
        I normal, subnormal, inf_from;
        if constexpr (M == RoundMode::fp16_rn) {
          const I bias = V::add(V::set1(0xFFFu), V::band(V::template srli<13>(rebiased), V::set1(1u)));
          normal = V::template srli<13>(V::add(rebiased, bias));
          subnormal = V::sub(V::casti(V::addf(V::castf(a), V::set1f(0.5f))), V::set1(0x3F000000u));
          inf_from = V::set1(0x477FEFFFu);  // a > this: |x| >= 65520
        } else {
          normal = V::template srli<13>(V::add(rebiased, V::template srli<19>(r)));
          const F y = V::mulf(V::castf(a), V::set1f(16777216.0f));
          const I q = V::cvtt(y);
          const F frac = V::subf(y, V::cvt(q));
          const I threshold = V::cvtt(V::mulf(frac, V::set1f(2147483648.0f)));
          const auto up = V::cmpgt(threshold, V::template srli<1>(r));
          subnormal = V::blend(up, q, V::add(q, V::set1(1u)));
          inf_from = V::set1(0x477FFFFFu);  // a > this: |x| >= 65536
        }
        I h = V::blend(V::cmpgt(a, V::set1(0x387FFFFFu)), subnormal, normal);
        h = V::blend(V::cmpgt(a, inf_from), h, V::set1(0x7C00u));
        return V::blend(nan, V::bor(h, sign), V::set1(0x7E00u));
      }
    }
  }

  // Stores one vector of results at dst[i]; returns how many lanes changed the stored bits.
  template <RoundMode M>
  static int store_counting(void* dst, std::size_t i, I bits) {
    if constexpr (M == RoundMode::fp32) {
      uint32_t* d = static_cast<uint32_t*>(dst) + i;
      const int changed = V::count_neq(V::load(d), bits);
      V::store(d, bits);
      return changed;
    } else {
      uint16_t* d = static_cast<uint16_t*>(dst) + i;
      const int changed = V::count_neq(V::load_u16(d), bits);
      V::store_u16(d, bits);
      return changed;
    }
  }

  template <RoundMode M>
  static void store_plain(void* dst, std::size_t i, I bits) {
    if constexpr (M == RoundMode::fp32)
      V::store(static_cast<uint32_t*>(dst) + i, bits);
    else
      V::store_u16(static_cast<uint16_t*>(dst) + i, bits);
  }

  static constexpr bool stochastic(RoundMode m) {
    return m == RoundMode::bf16_sr || m == RoundMode::fp16_sr;
  }

  // Whole tiles: src[0, tiles*128) with global index g0 (a multiple of 128) for src[0].
  template <RoundMode M>
  static void round_tiles(const float* src, void* dst, std::size_t tiles, SrKey key,
                          uint64_t g0) {
    alignas(64) uint32_t rnd[kTile] = {};
    for (std::size_t t = 0; t < tiles; ++t) {
      if constexpr (stochastic(M)) tile_bits<M>(key, g0 + t * kTile, rnd);
      for (std::size_t v = 0; v < kTile; v += W) {
        const std::size_t i = t * kTile + v;
        store_plain<M>(dst, i, round_vec<M>(V::load(src + i), V::load(rnd + v)));
      }
    }
  }

  // Whole tiles of a fused AdamW range starting at element `first` of r (global index a multiple of
  // 128). Lane arithmetic follows adamw_element() operation by operation.
  template <RoundMode M>
  static uint64_t adamw_tiles(const AdamWRange& r, std::size_t first,
                              std::size_t tiles, const AdamWScalars& s,
                              SrKey key) {
    const F beta1 = V::set1f(s.beta1), omb1 = V::set1f(s.one_minus_beta1);
    const F beta2 = V::set1f(s.beta2), omb2 = V::set1f(s.one_minus_beta2);
    const F step_size = V::set1f(s.step_size), sqrt_bc2 = V::set1f(s.sqrt_bc2);
    const F eps = V::set1f(s.eps), decay = V::set1f(s.decay_factor);
    const F grad_scale = V::set1f(s.grad_scale);
    alignas(64) uint32_t rnd[kTile] = {};
    uint64_t changed = 0;
    for (std::size_t t = 0; t < tiles; ++t) {
      const std::size_t base = first + t * kTile;
      if constexpr (stochastic(M)) tile_bits<M>(key, r.index0 + base, rnd);
      for (std::size_t v = 0; v < kTile; v += W) {
        const std::size_t i = base + v;
        const F g = V::mulf(V::loadf(r.grad + i), grad_scale);
        const F m = V::addf(V::mulf(V::loadf(r.exp_avg + i), beta1), V::mulf(omb1, g));
        const F vv = V::addf(V::mulf(V::loadf(r.exp_avg_sq + i), beta2), V::mulf(omb2, V::mulf(g, g)));
        F p = V::loadf(r.master + i);
        if (r.decay) p = V::mulf(p, decay);
        const F denom = V::addf(V::divf(V::sqrtf(vv), sqrt_bc2), eps);
        p = V::subf(p, V::mulf(step_size, V::divf(m, denom)));
        V::storef(r.exp_avg + i, m);
        V::storef(r.exp_avg_sq + i, vv);
        V::storef(r.master + i, p);
        changed += store_counting<M>(r.compute, i, round_vec<M>(V::casti(p), V::load(rnd + v)));
      }
    }
    return changed;
  }

  // Splits [0, n) into a scalar head up to the first global 128-boundary, whole tiles, and a tail.
  struct Split {
    std::size_t head, tiles, tail;
  };
  static Split split(std::size_t n, uint64_t index0) {
    std::size_t head = std::size_t((kTile - index0 % kTile) % kTile);
    if (head > n) head = n;
    const std::size_t tiles = (n - head) / kTile;
    return {head, tiles, n - head - tiles * kTile};
  }

  template <RoundMode M>
  static void round_range(const float* src, void* dst, std::size_t n, SrKey key,
                          uint64_t index0) {
    const Split sp = split(n, index0);
    const std::size_t bytes = compute_bytes(M);
    char* out = static_cast<char*>(dst);
    round_scalar(src, out, sp.head, M, key, index0);
    round_tiles<M>(src + sp.head, out + sp.head * bytes, sp.tiles, key, index0 + sp.head);
    const std::size_t done = sp.head + sp.tiles * kTile;
    round_scalar(src + done, out + done * bytes, sp.tail, M, key, index0 + done);
  }

  template <RoundMode M>
  static uint64_t adamw_range(const AdamWRange& r, const AdamWScalars& s,
                              SrKey key) {
    const Split sp = split(r.n, r.index0);
    uint64_t changed = adamw_scalar(sub_range<M>(r, 0, sp.head), s, M, key);
    changed += adamw_tiles<M>(r, sp.head, sp.tiles, s, key);
    const std::size_t done = sp.head + sp.tiles * kTile;
    return changed + adamw_scalar(sub_range<M>(r, done, sp.tail), s, M, key);
  }

  static constexpr std::size_t compute_bytes(RoundMode m) {
    return m == RoundMode::fp32 ? 4 : 2;
  }

  template <RoundMode M>
  static AdamWRange sub_range(const AdamWRange& r,
                                               std::size_t first, std::size_t n) {
    AdamWRange s = r;
    s.master += first;
    s.grad += first;
    s.exp_avg += first;
    s.exp_avg_sq += first;
    s.compute = static_cast<char*>(r.compute) + first * compute_bytes(M);
    s.n = n;
    s.index0 = r.index0 + first;
    return s;
  }
};

// Run-time mode -> compile-time loop.
template <class V>
void round_dispatch(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key,
                    uint64_t index0) {
  using K = SimdKernels<V>;
  switch (mode) {
    case RoundMode::fp32: return K::template round_range<RoundMode::fp32>(src, dst, n, key, index0);
    case RoundMode::bf16_rn: return K::template round_range<RoundMode::bf16_rn>(src, dst, n, key, index0);
    case RoundMode::bf16_sr: return K::template round_range<RoundMode::bf16_sr>(src, dst, n, key, index0);
    case RoundMode::fp16_rn: return K::template round_range<RoundMode::fp16_rn>(src, dst, n, key, index0);
    case RoundMode::fp16_sr: return K::template round_range<RoundMode::fp16_sr>(src, dst, n, key, index0);
  }
}

template <class V>
uint64_t adamw_dispatch(const AdamWRange& r, const AdamWScalars& s, RoundMode mode, SrKey key) {
  using K = SimdKernels<V>;
  switch (mode) {
    case RoundMode::fp32: return K::template adamw_range<RoundMode::fp32>(r, s, key);
    case RoundMode::bf16_rn: return K::template adamw_range<RoundMode::bf16_rn>(r, s, key);
    case RoundMode::bf16_sr: return K::template adamw_range<RoundMode::bf16_sr>(r, s, key);
    case RoundMode::fp16_rn: return K::template adamw_range<RoundMode::fp16_rn>(r, s, key);
    case RoundMode::fp16_sr: return K::template adamw_range<RoundMode::fp16_sr>(r, s, key);
  }
  return 0;
}
