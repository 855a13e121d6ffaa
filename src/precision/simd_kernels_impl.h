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

  static constexpr int kVecs = int(kTile) / W;  // vectors per tile

  // Random bits of the 128 elements starting at global index g (a multiple of 128), in registers:
  // r[v] holds the bits of elements v*W .. v*W + W-1. V::philox16 gives, for 16 consecutive Philox
  // blocks, words[w][part] = word w of blocks part*W .. part*W + W-1, which is the element order of
  // the SR tile layout (round_math.h).
  template <RoundMode M>
  static void tile_bits(const typename V::PhiloxKey& key, uint64_t g, I* r) {
    I words[4][16 / W];
    if constexpr (M == RoundMode::fp16_sr) {
      for (int half = 0; half < 2; ++half) {  // two 64-element tiles
        V::philox16(key, g / 64 * 16 + 16 * half, words);
        for (int w = 0; w < 4; ++w)
          for (int part = 0; part < 16 / W; ++part) r[(64 * half + 16 * w) / W + part] = words[w][part];
      }
    } else if constexpr (M == RoundMode::bf16_sr) {
      V::philox16(key, g / 128 * 16, words);
      const I low16 = V::set1(0xFFFFu);
      for (int k = 0; k < 8; ++k)
        for (int part = 0; part < 16 / W; ++part) {
          const I w = words[k >> 1][part];
          r[16 * k / W + part] = (k & 1) ? V::template srli<16>(w) : V::band(w, low16);
        }
    } else {
      for (int v = 0; v < kVecs; ++v) r[v] = V::set1(0);
    }
  }

  static constexpr bool is_bf16(RoundMode m) { return m == RoundMode::bf16_rn || m == RoundMode::bf16_sr; }

  // One vector of round_math.h's bf16_rn / bf16_sr / fp16_rn / fp16_sr (lanes: FP32 bits in).
  // FP16 results are in the low 16 bits of each lane; BF16 results are left in the HIGH 16 bits
  // (the final shift of bf16_rn / bf16_sr is done by the packing step, which picks high halves);
  // fp32 mode passes the bits through.
  template <RoundMode M>
  static I round_vec(I b, I r) {
    if constexpr (M == RoundMode::fp32) {
      return b;
    } else {
      const auto nan = V::isnan(b);
      if constexpr (M == RoundMode::bf16_rn) {
        const I bias = V::add(V::set1(0x7FFFu), V::band(V::template srli<16>(b), V::set1(1u)));
        return V::blend(nan, V::add(b, bias), V::set1(0x7FC00000u));
      } else if constexpr (M == RoundMode::bf16_sr) {
        return V::blend(nan, V::add(b, r), V::set1(0x7FC00000u));
      } else {
        const I a = V::band(b, V::set1(0x7FFFFFFFu));
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

  // Stores two vectors of results (elements i .. i + 2W-1) at dst; when `kCount`, returns how many
  // of them changed the stored bits. 16-bit results are packed into one register first; with
  // `kStream` that register is written with a non-temporal store (dst 64-byte aligned).
  template <RoundMode M, bool kCount, bool kStream = false>
  static int store_pair(void* dst, std::size_t i, I lo, I hi) {
    int changed = 0;
    if constexpr (M == RoundMode::fp32) {
      uint32_t* d = static_cast<uint32_t*>(dst) + i;
      if constexpr (kCount) changed = V::count_neq32(V::load(d), lo) + V::count_neq32(V::load(d + W), hi);
      V::store(d, lo);
      V::store(d + W, hi);
    } else {
      uint16_t* d = static_cast<uint16_t*>(dst) + i;
      const I packed = is_bf16(M) ? V::pack_hi16(lo, hi) : V::pack_u16(lo, hi);
      if constexpr (kCount) changed = V::count_neq16(V::load(d), packed);
      if constexpr (kStream)
        V::stream(d, packed);
      else
        V::store(d, packed);
    }
    return changed;
  }

  static constexpr bool stochastic(RoundMode m) { return m == RoundMode::bf16_sr || m == RoundMode::fp16_sr; }

  // Whole tiles: src[0, tiles*128) with global index g0 (a multiple of 128) for src[0].
  template <RoundMode M, bool kStream>
  static void round_tiles(const float* src, void* dst, std::size_t tiles, SrKey key, uint64_t g0) {
    const typename V::PhiloxKey philox_key(key.seed, key.step);
    I r[kVecs];
    for (std::size_t t = 0; t < tiles; ++t) {
      tile_bits<M>(philox_key, g0 + t * kTile, r);
      for (int v = 0; v < kVecs; v += 2) {
        const std::size_t i = t * kTile + std::size_t(v) * W;
        store_pair<M, false, kStream>(dst, i, round_vec<M>(V::load(src + i), r[v]),
                                      round_vec<M>(V::load(src + i + W), r[v + 1]));
      }
    }
  }

  // Large outputs go around the cache: a non-temporal store skips the read-for-ownership of every
  // destination line, which is a third of a rounding pass's memory traffic. Small outputs stay
  // cached for the forward pass that reads them next.
  static constexpr std::size_t kStreamMinBytes = std::size_t(8) << 20;

  template <RoundMode M>
  static void round_tiles_any(const float* src, void* dst, std::size_t tiles, SrKey key, uint64_t g0) {
    const bool aligned = reinterpret_cast<uintptr_t>(dst) % 64 == 0;
    if (M != RoundMode::fp32 && aligned && tiles * kTile * 2 >= kStreamMinBytes) {
      round_tiles<M, true>(src, dst, tiles, key, g0);
      V::stream_fence();
    } else {
      round_tiles<M, false>(src, dst, tiles, key, g0);
    }
  }

  // AdamW on one vector of elements at i, in adamw_element()'s order; returns the new master bits.
  struct AdamWConstants {
    F beta1, omb1, beta2, omb2, step_size, sqrt_bc2, eps, decay, grad_scale;
  };
  static I adamw_vec(const AdamWRange& r, std::size_t i, const AdamWConstants& c) {
    const F g = V::mulf(V::loadf(r.grad + i), c.grad_scale);
    const F m = V::addf(V::mulf(V::loadf(r.exp_avg + i), c.beta1), V::mulf(c.omb1, g));
    const F vv = V::addf(V::mulf(V::loadf(r.exp_avg_sq + i), c.beta2), V::mulf(c.omb2, V::mulf(g, g)));
    F p = V::loadf(r.master + i);
    if (r.decay) p = V::mulf(p, c.decay);
    const F denom = V::addf(V::divf(V::sqrtf(vv), c.sqrt_bc2), c.eps);
    p = V::subf(p, V::mulf(c.step_size, V::divf(m, denom)));
    V::storef(r.exp_avg + i, m);
    V::storef(r.exp_avg_sq + i, vv);
    V::storef(r.master + i, p);
    return V::casti(p);
  }

  // Whole tiles of a fused AdamW range starting at element `first` of r (global index a multiple of
  // 128).
  template <RoundMode M>
  static uint64_t adamw_tiles(const AdamWRange& r, std::size_t first, std::size_t tiles, const AdamWScalars& s,
                              SrKey key) {
    const AdamWConstants c{
        V::set1f(s.beta1),     V::set1f(s.one_minus_beta1), V::set1f(s.beta2), V::set1f(s.one_minus_beta2),
        V::set1f(s.step_size), V::set1f(s.sqrt_bc2),        V::set1f(s.eps),   V::set1f(s.decay_factor),
        V::set1f(s.grad_scale)};
    const typename V::PhiloxKey philox_key(key.seed, key.step);
    I rnd[kVecs];
    uint64_t changed = 0;
    for (std::size_t t = 0; t < tiles; ++t) {
      const std::size_t base = first + t * kTile;
      tile_bits<M>(philox_key, r.index0 + base, rnd);
      for (int v = 0; v < kVecs; v += 2) {
        const std::size_t i = base + std::size_t(v) * W;
        const I lo = round_vec<M>(adamw_vec(r, i, c), rnd[v]);
        const I hi = round_vec<M>(adamw_vec(r, i + W, c), rnd[v + 1]);
        changed += store_pair<M, true>(r.compute, i, lo, hi);
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
  static void round_range(const float* src, void* dst, std::size_t n, SrKey key, uint64_t index0) {
    const Split sp = split(n, index0);
    const std::size_t bytes = compute_bytes(M);
    char* out = static_cast<char*>(dst);
    round_scalar(src, out, sp.head, M, key, index0);
    round_tiles_any<M>(src + sp.head, out + sp.head * bytes, sp.tiles, key, index0 + sp.head);
    const std::size_t done = sp.head + sp.tiles * kTile;
    round_scalar(src + done, out + done * bytes, sp.tail, M, key, index0 + done);
  }

  template <RoundMode M>
  static uint64_t adamw_range(const AdamWRange& r, const AdamWScalars& s, SrKey key) {
    const Split sp = split(r.n, r.index0);
    uint64_t changed = adamw_scalar(sub_range<M>(r, 0, sp.head), s, M, key);
    changed += adamw_tiles<M>(r, sp.head, sp.tiles, s, key);
    const std::size_t done = sp.head + sp.tiles * kTile;
    return changed + adamw_scalar(sub_range<M>(r, done, sp.tail), s, M, key);
  }

  // One vector of fp8_e4m3_scaled_fast (fp8.h) for one channel's powers down = 2^-e, up = 2^e, lane
  // for lane (b: FP32 bits in; r: the lanes' sr_bits_fp16 under SR). The BF16 result is left in the
  // HIGH 16 bits of each lane, as round_vec<bf16_*> leaves it.
  template <bool kSr>
  static I fp8_vec(I b, I r, F down, F up) {
    const auto nan = V::isnan(b);
    const I sign = V::band(b, V::set1(0x80000000u));
    const I qb = V::casti(V::mulf(V::castf(V::band(b, V::set1(0x7FFFFFFFu))), down));  // |x| / 2^e, exact
    // E4M3's normal range: 3 mantissa bits of q's pattern (bf16_coarse_rn / _sr at d = 20).
    const I bias =
        kSr ? V::template srli<12>(r) : V::add(V::set1(0x7FFFFu), V::band(V::template srli<20>(qb), V::set1(1u)));
    const I normal = V::band(V::add(qb, bias), V::set1(0xFFF00000u));
    // Subnormals, multiples of 2^-9: y = q x 2^9 in [0, 8); RN to even by the 2^23 shift, SR by
    // comparing the fraction's top 31 bits with the top 31 random bits.
    const F y = V::mulf(V::castf(qb), V::set1f(512.0f));
    F steps;
    if constexpr (kSr) {
      const I lo = V::cvtt(y);
      const F frac = V::subf(y, V::cvt(lo));
      const auto up_mask = V::cmpgt(V::cvtt(V::mulf(frac, V::set1f(2147483648.0f))), V::template srli<1>(r));
      steps = V::cvt(V::blend(up_mask, lo, V::add(lo, V::set1(1u))));
    } else {
      steps = V::subf(V::addf(y, V::set1f(8388608.0f)), V::set1f(8388608.0f));
    }
    const I sub = V::casti(V::mulf(steps, V::set1f(0.001953125f)));
    const I max448 = V::set1(0x43E00000u);                            // 448
    I q = V::blend(V::cmpgt(qb, V::set1(0x3C7FFFFFu)), sub, normal);  // q >= 2^-6: the normal range
    q = V::blend(V::cmpgt(q, max448), q, max448);                     // (not reached for q <= 448)
    q = V::blend(V::cmpgt(qb, max448), q, max448);                    // saturation (and +-Inf)
    const I v = V::casti(V::mulf(V::castf(q), up));
    const I h = V::add(v, V::add(V::set1(0x7FFFu), V::band(V::template srli<16>(v), V::set1(1u))));  // bf16_rn
    return V::blend(nan, V::bor(h, sign), V::set1(0x7FC00000u));
  }

  template <bool kSr>
  static void fp8_tiles(const float* src, uint16_t* dst, std::size_t tiles, SrKey key, uint64_t g0, float down,
                        float up) {
    const typename V::PhiloxKey philox_key(key.seed, key.step);
    const F d = V::set1f(down), u = V::set1f(up);
    I r[kVecs];
    for (int v = 0; v < kVecs; ++v) r[v] = V::set1(0);
    for (std::size_t t = 0; t < tiles; ++t) {
      if constexpr (kSr) tile_bits<RoundMode::fp16_sr>(philox_key, g0 + t * kTile, r);
      for (int v = 0; v < kVecs; v += 2) {
        const std::size_t i = t * kTile + std::size_t(v) * W;
        store_pair<RoundMode::bf16_rn, false>(dst, i, fp8_vec<kSr>(V::load(src + i), r[v], d, u),
                                              fp8_vec<kSr>(V::load(src + i + W), r[v + 1], d, u));
      }
    }
  }

  static void fp8_range(const float* src, uint16_t* dst, std::size_t n, uint64_t index0, float down, float up,
                        bool stochastic, SrKey key) {
    const Split sp = split(n, index0);
    fp8_scalar(src, dst, sp.head, index0, down, up, stochastic, key);
    if (stochastic)
      fp8_tiles<true>(src + sp.head, dst + sp.head, sp.tiles, key, index0 + sp.head, down, up);
    else
      fp8_tiles<false>(src + sp.head, dst + sp.head, sp.tiles, key, index0 + sp.head, down, up);
    const std::size_t done = sp.head + sp.tiles * kTile;
    fp8_scalar(src + done, dst + done, sp.tail, index0 + done, down, up, stochastic, key);
  }

  static constexpr std::size_t compute_bytes(RoundMode m) { return m == RoundMode::fp32 ? 4 : 2; }

  template <RoundMode M>
  static AdamWRange sub_range(const AdamWRange& r, std::size_t first, std::size_t n) {
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
void round_dispatch(const float* src, void* dst, std::size_t n, RoundMode mode, SrKey key, uint64_t index0) {
  using K = SimdKernels<V>;
  switch (mode) {
    case RoundMode::fp32:
      return K::template round_range<RoundMode::fp32>(src, dst, n, key, index0);
    case RoundMode::bf16_rn:
      return K::template round_range<RoundMode::bf16_rn>(src, dst, n, key, index0);
    case RoundMode::bf16_sr:
      return K::template round_range<RoundMode::bf16_sr>(src, dst, n, key, index0);
    case RoundMode::fp16_rn:
      return K::template round_range<RoundMode::fp16_rn>(src, dst, n, key, index0);
    case RoundMode::fp16_sr:
      return K::template round_range<RoundMode::fp16_sr>(src, dst, n, key, index0);
  }
}

template <class V>
uint64_t adamw_dispatch(const AdamWRange& r, const AdamWScalars& s, RoundMode mode, SrKey key) {
  using K = SimdKernels<V>;
  switch (mode) {
    case RoundMode::fp32:
      return K::template adamw_range<RoundMode::fp32>(r, s, key);
    case RoundMode::bf16_rn:
      return K::template adamw_range<RoundMode::bf16_rn>(r, s, key);
    case RoundMode::bf16_sr:
      return K::template adamw_range<RoundMode::bf16_sr>(r, s, key);
    case RoundMode::fp16_rn:
      return K::template adamw_range<RoundMode::fp16_rn>(r, s, key);
    case RoundMode::fp16_sr:
      return K::template adamw_range<RoundMode::fp16_sr>(r, s, key);
  }
  return 0;
}
