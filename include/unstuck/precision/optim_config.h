// Options of the optimizer: AdamW hyper-parameters on the FP32 master and gradient clipping.
// Header-only; the generic config code (unstuck/config/config.h) loads and dumps it via visit().
#pragma once

namespace unstuck::precision {

struct OptimConfig {
  double lr = 1e-5;           // peak learning rate
  double beta1 = 0.9;         // AdamW first-moment decay
  double beta2 = 0.999;       // AdamW second-moment decay
  double eps = 1e-8;          // added to sqrt(v_hat)
  double weight_decay = 0.0;  // decoupled weight decay
  double grad_clip = 1.0;     // max global gradient L2 norm; 0 = no clipping

  template <class V>
  void visit(V& v) {
    v("lr", lr, "peak learning rate of AdamW");
    v("beta1", beta1, "AdamW first-moment decay, in [0, 1)");
    v("beta2", beta2, "AdamW second-moment decay, in [0, 1)");
    v("eps", eps, "AdamW epsilon added to sqrt(v_hat)");
    v("weight_decay", weight_decay, "decoupled weight decay (AdamW), 0 = none");
    v("grad_clip", grad_clip, "clip the global gradient L2 norm to this; 0 = no clipping");
  }
};

}  // namespace unstuck::precision
