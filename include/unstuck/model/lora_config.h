// Options of LoRA training (`lora:`): rank 0 trains every parameter; rank > 0 freezes the base
// model in the compute dtype and trains low-rank adapters on the named projections (PEFT's
// conventions, model/lora.h), their FP32 master rounded by precision.mode like a full model's.
// Header-only; the generic config code loads and dumps it via visit().
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace unstuck::model {

// How the adapters start. kaiming and gaussian: B = 0 (the adapted model starts as the base), A as
// PEFT draws it. pissa: A and B from the base matrix's principal singular vectors, the base replaced
// by the residual (model/lora.h, pissa_init).
enum class LoraInit {
  kaiming,   // PEFT's default (init_lora_weights: true): kaiming_uniform(a = sqrt(5)), U(-1/sqrt(in), 1/sqrt(in))
  gaussian,  // init_lora_weights: "gaussian": N(0, (1/r)^2)
  pissa,     // init_lora_weights: "pissa" (arXiv 2404.02948): each adapted matrix's top singular vectors
};
inline constexpr std::array<std::pair<LoraInit, const char*>, 3> kLoraInitNames{{
    {LoraInit::kaiming, "kaiming"},
    {LoraInit::gaussian, "gaussian"},
    {LoraInit::pissa, "pissa"},
}};
constexpr const auto& enum_names(LoraInit) { return kLoraInitNames; }

struct LoraConfig {
  int64_t rank = 0;     // r; 0 = full-parameter training
  double alpha = 16;    // lora_alpha: the adapters' output is scaled by alpha / r
  bool rslora = false;  // scale by alpha / sqrt(r) instead (rsLoRA)
  double dropout = 0;   // lora_dropout: dropout on the adapters' input in the training forwards
  std::vector<std::string> target_modules{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  LoraInit init = LoraInit::kaiming;
  int64_t pissa_niter = 0;  // PiSSA's SVD: 0 = exact (full SVD), N > 0 = randomized with N subspace iterations

  bool enabled() const { return rank > 0; }

  template <class V>
  void visit(V& v) {
    v("rank", rank,
      "adapter rank r; 0 trains every parameter, > 0 freezes the base model in the compute dtype and trains LoRA "
      "adapters (their FP32 master rounded by precision.mode)");
    v("alpha", alpha, "lora_alpha: the adapters' output is scaled by alpha / rank");
    v("rslora", rslora, "rsLoRA: scale by alpha / sqrt(rank) instead");
    v("dropout", dropout,
      "lora_dropout: probability of zeroing an element of an adapter's input in the training forwards (the update's "
      "backward passes), from counter-based masks; rollouts, measurements and evaluation compute without it; [0, 1)");
    v("target_modules", target_modules,
      "projections that get adapters, by PEFT's module names: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
      "down_proj");
    v("init", init,
      "how the adapters start: kaiming (PEFT's default: A ~ U(-1/sqrt(in), 1/sqrt(in)), B = 0), gaussian (A ~ "
      "N(0, 1/rank^2), B = 0) or pissa (A and B from each base matrix's top-rank singular vectors, the base "
      "replaced by the residual; PEFT's \"pissa\")");
    v("pissa_niter", pissa_niter,
      "with init pissa: 0 takes the singular vectors from a full SVD of each matrix; N > 0 from a randomized SVD "
      "with N subspace iterations (PEFT's \"pissa_niter_N\"; seconds instead of minutes per 7B layer; seeded by "
      "run.seed); [0, 64]");
  }
};

}  // namespace unstuck::model
