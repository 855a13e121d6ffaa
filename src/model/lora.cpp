// LoRA adapters in PEFT's format: the layout of a model's adapters, reading a PEFT adapter
// directory into it (every adapter_config.json setting either computed or refused by name), and
// merging them into the base weights.
#include "unstuck/model/lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors.h"
#include "unstuck/model/model_io.h"

namespace unstuck::model {
namespace {

namespace fs = std::filesystem;

constexpr const char* kModuleNames[kLoraModules] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};

// "self_attn.q_proj" / "mlp.gate_proj": the module's path inside a layer.
std::string module_path(LoraModule m) {
  return std::string(int(m) <= int(LoraModule::o_proj) ? "self_attn." : "mlp.") + lora_module_name(m);
}

// "model.layers.<layer>.self_attn.q_proj": the module's key in the base model (PEFT matches targets
// against it; the base matrix is key + ".weight", the adapters "base_model.model." + key + ".lora_A.weight").
std::string module_key(int64_t layer, LoraModule m) {
  return "model.layers." + std::to_string(layer) + "." + module_path(m);
}

// adapter_config.json keys that describe the adapter without changing what it computes (or that
// only matter with a setting that is refused when on): any value.
const std::set<std::string> kInformational = {
    "base_model_name_or_path", "revision",     "task_type",     "inference_mode",   "auto_mapping", "peft_version",
    "init_lora_weights",       "lora_dropout", "megatron_core", "qalora_group_size"};

// Whether `v` is a setting's off value: null, false, "", an empty list or object.
bool is_off(const nlohmann::json& v) {
  return v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v.get<std::string>().empty()) ||
         ((v.is_array() || v.is_object()) && v.empty());
}

// PEFT's matching of target_modules entries (a module name or a path) against the model's module
// keys: key == entry or key ends with "." + entry. The adapted modules of every layer must be the
// same projections (a per-layer selection is not computed); an entry that names something else, or
// matches nothing, is refused.
std::vector<LoraModule> match_targets(const std::vector<std::string>& entries, const ModelConfig& config,
                                      const std::string& what) {
  std::vector<std::vector<bool>> hit(std::size_t(kLoraModules), std::vector<bool>(std::size_t(config.n_layers)));
  for (const std::string& e : entries) {
    const std::size_t dot = e.rfind('.');
    parse_lora_module(dot == std::string::npos ? e : e.substr(dot + 1), what);  // names a projection
    bool any = false;
    for (int m = 0; m < kLoraModules; ++m)
      for (int64_t i = 0; i < config.n_layers; ++i) {
        const std::string key = module_key(i, LoraModule(m));
        if (key == e || (key.size() > e.size() && key.compare(key.size() - e.size(), e.size(), e) == 0 &&
                         key[key.size() - e.size() - 1] == '.')) {
          hit[std::size_t(m)][std::size_t(i)] = true;
          any = true;
        }
      }
    if (!any)
      throw UserError(what + ": '" + e + "' matches no module of this model (" + std::to_string(config.n_layers) +
                      " layers)");
  }
  std::vector<LoraModule> out;
  for (int m = 0; m < kLoraModules; ++m) {
    const auto& h = hit[std::size_t(m)];
    const std::size_t n = std::size_t(std::count(h.begin(), h.end(), true));
    if (n == 0) continue;
    if (n != h.size())
      throw UserError(what + ": " + lora_module_name(LoraModule(m)) + " is adapted in " + std::to_string(n) + " of " +
                      std::to_string(h.size()) + " layers; unstuck adapts a projection in every layer or none");
    out.push_back(LoraModule(m));
  }
  return out;
}

// Calls fn(a, b, w) for every adapted matrix, in lora_layout's order: its A and B entries in
// `layout` (lora_layout(config, spec)) and its base matrix's in `base` (llama_layout(config)).
template <class Fn>
void for_each_adapted(const ModelConfig& config, const LoraSpec& spec, const ParamLayout& layout,
                      const ParamLayout& base, Fn&& fn) {
  std::size_t k = 0;
  for (int64_t i = 0; i < config.n_layers; ++i)
    for (int m = 0; m < kLoraModules; ++m) {
      if (!spec.targets_module(LoraModule(m))) continue;
      fn(layout.entries[k], layout.entries[k + 1], *base.find(module_key(i, LoraModule(m)) + ".weight"));
      k += 2;
    }
}

}  // namespace

const char* lora_module_name(LoraModule m) { return kModuleNames[int(m)]; }

LoraModule parse_lora_module(const std::string& name, const std::string& what) {
  for (int i = 0; i < kLoraModules; ++i)
    if (name == kModuleNames[i]) return LoraModule(i);
  throw UserError(
      what + ": '" + name +
      "' is not a projection unstuck adapts (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)");
}

double LoraSpec::scaling() const { return rslora ? alpha / std::sqrt(double(rank)) : alpha / double(rank); }

bool LoraSpec::targets_module(LoraModule m) const {
  for (LoraModule t : targets)
    if (t == m) return true;
  return false;
}

LoraSpec lora_spec(const LoraConfig& config) {
  if (config.rank <= 0) throw std::invalid_argument("lora_spec: lora.rank is 0 (full-parameter training)");
  LoraSpec spec;
  spec.rank = config.rank;
  spec.alpha = config.alpha;
  spec.rslora = config.rslora;
  spec.dropout = config.dropout;
  spec.pissa_niter = config.pissa_niter;
  for (const std::string& name : config.target_modules) {
    const LoraModule m = parse_lora_module(name, "lora.target_modules");
    if (spec.targets_module(m)) throw UserError("lora.target_modules names '" + name + "' twice");
    spec.targets.push_back(m);
  }
  if (spec.targets.empty()) throw UserError("lora.target_modules must name at least one projection");
  std::sort(spec.targets.begin(), spec.targets.end());
  return spec;
}

torch::Tensor init_lora(const ModelConfig& config, const LoraSpec& spec, LoraInit init, uint64_t seed) {
  const ParamLayout layout = lora_layout(config, spec);
  torch::Tensor flat = torch::zeros({layout.total}, torch::kFloat32);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const ParamEntry& e : layout.entries) {
    if (e.name.find(".lora_A.") == std::string::npos) continue;         // B stays zero
    torch::Tensor a = flat.narrow(0, e.offset, e.numel).view(e.shape);  // (r, in)
    if (init == LoraInit::pissa) throw std::invalid_argument("init_lora: PiSSA adapters come from pissa_init");
    if (init == LoraInit::gaussian) {
      a.normal_(0.0, 1.0 / double(spec.rank), gen);
    } else {  // kaiming_uniform(a = sqrt(5)) on fan_in = in: bound sqrt(6 / ((1 + 5) in)) = 1 / sqrt(in)
      const double bound = 1.0 / std::sqrt(double(e.shape[1]));
      a.uniform_(-bound, bound, gen);
    }
  }
  return flat;
}

namespace {

struct TopSingular {
  torch::Tensor U, S, Vh;  // (out, r), (r) descending, (r, in)
};

// The r leading singular triplets of W (out, in). niter 0: a full SVD. niter > 0: randomized
// subspace iteration (Halko, Martinsson & Tropp 2011, "Finding structure with randomness",
// Algorithms 4.4 and 5.1) with r columns, what peft's "pissa_niter_N" asks of torch.svd_lowrank:
// Q spans W Omega for a Gaussian Omega (in, r), re-orthonormalized after every product with W^T
// and W (N rounds), then the SVD of the small Q^T W. Its error falls as (S_{r+1} / S_r)^(2N + 1);
// the residual W - s B A is exact whatever the triplets are, so the start model is the base either way.
TopSingular top_singular(const torch::Tensor& W, int64_t r, int64_t niter, at::Generator& gen) {
  if (niter == 0) {
    const auto [U, S, Vh] = at::linalg_svd(W, /*full_matrices=*/false);
    return {U.narrow(1, 0, r), S.narrow(0, 0, r), Vh.narrow(0, 0, r)};
  }
  const auto orthonormal = [](const torch::Tensor& Y) { return std::get<0>(at::linalg_qr(Y)); };
  const torch::Tensor omega = at::randn({W.size(1), r}, gen, torch::kFloat32).to(W.device(), W.scalar_type());
  torch::Tensor Q = orthonormal(W.mm(omega));  // (out, r)
  for (int64_t i = 0; i < niter; ++i) Q = orthonormal(W.mm(orthonormal(W.t().mm(Q))));
  const auto [Ub, S, Vh] = at::linalg_svd(Q.t().mm(W), /*full_matrices=*/false);  // (r, r), (r), (r, in)
  return {Q.mm(Ub), S, Vh};
}

}  // namespace

torch::Tensor pissa_init(const ModelConfig& config, const LoraSpec& spec, torch::Tensor& base, uint64_t seed) {
  const ParamLayout layout = lora_layout(config, spec), base_layout = llama_layout(config);
  if (base.scalar_type() != torch::kFloat32 || base.numel() != base_layout.total || !base.is_contiguous())
    throw std::invalid_argument("pissa_init: expected the FP32 base in llama_layout order");
  if (spec.pissa_niter < 0) throw std::invalid_argument("pissa_init: pissa_niter must be >= 0");
  torch::NoGradGuard no_grad;
  torch::Tensor flat = torch::zeros({layout.total}, base.options());
  const double s = spec.scaling();
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);  // randomized SVD: in layout order
  for_each_adapted(config, spec, layout, base_layout,
                   [&](const ParamEntry& a, const ParamEntry& b, const ParamEntry& w) {
                     torch::Tensor W = base.narrow(0, w.offset, w.numel).view(w.shape);  // (out, in)
                     const int64_t r = spec.rank, bound = std::min(w.shape[0], w.shape[1]);
                     if (r > bound)
                       throw UserError("lora.init pissa: lora.rank " + std::to_string(r) + " exceeds the rank bound " +
                                       std::to_string(bound) + " of " + w.name);
                     const TopSingular t = top_singular(W, r, spec.pissa_niter, gen);
                     const torch::Tensor root = (t.S / s).sqrt();      // (r)
                     const torch::Tensor A = at::diag(root).mm(t.Vh);  // (r, in)
                     const torch::Tensor B = t.U.mm(at::diag(root));   // (out, r)
                     flat.narrow(0, a.offset, a.numel).view(a.shape).copy_(A);
                     flat.narrow(0, b.offset, b.numel).view(b.shape).copy_(B);
                     W.addmm_(B, A, /*beta=*/1.0, /*alpha=*/-s);  // W - s B A in place: no (out, in) temporaries
                   });
  return flat;
}

LoadedAdapter pissa_as_lora(const ModelConfig& config, const LoraSpec& spec, const torch::Tensor& adapters,
                            const torch::Tensor& initial) {
  const ParamLayout layout = lora_layout(config, spec);
  if (adapters.numel() != layout.total || initial.numel() != layout.total)
    throw std::invalid_argument("pissa_as_lora: buffers do not match lora_layout");
  LoadedAdapter out;
  out.spec = spec;
  out.spec.rank = 2 * spec.rank;
  out.spec.alpha = spec.rslora ? spec.alpha * std::sqrt(2.0) : 2 * spec.alpha;
  const ParamLayout wide = lora_layout(config, out.spec);
  const torch::Tensor now = adapters.detach().to(torch::kCPU),
                      start = initial.detach().to(torch::kCPU, now.scalar_type());
  out.flat = torch::zeros({wide.total}, now.options());
  const auto view = [](const torch::Tensor& t, const ParamEntry& e) {
    return t.narrow(0, e.offset, e.numel).view(e.shape);
  };
  for (std::size_t k = 0; k < layout.entries.size(); k += 2) {
    const ParamEntry &a = layout.entries[k], &b = layout.entries[k + 1];
    view(out.flat, wide.entries[k]).copy_(at::cat({view(now, a), view(start, a)}, 0));       // (2r, in)
    view(out.flat, wide.entries[k + 1]).copy_(at::cat({view(now, b), -view(start, b)}, 1));  // (out, 2r)
  }
  return out;
}

ParamLayout lora_layout(const ModelConfig& config, const LoraSpec& spec) {
  if (spec.rank <= 0) throw UserError("LoRA rank must be positive, got " + std::to_string(spec.rank));
  const ParamLayout base = llama_layout(config);
  ParamLayout layout;
  const auto add = [&](std::string name, std::vector<int64_t> shape) {
    const int64_t numel = shape[0] * shape[1];
    layout.entries.push_back({std::move(name), std::move(shape), layout.total, numel, true});
    layout.total += (numel + kParamAlign - 1) / kParamAlign * kParamAlign;
  };
  for (int64_t i = 0; i < config.n_layers; ++i)
    for (int m = 0; m < kLoraModules; ++m) {
      if (!spec.targets_module(LoraModule(m))) continue;
      const std::string path = module_key(i, LoraModule(m));
      const ParamEntry* w = base.find(path + ".weight");
      if (!w) throw std::logic_error("lora_layout: no base matrix " + path + ".weight");
      add("base_model.model." + path + ".lora_A.weight", {spec.rank, w->shape[1]});
      add("base_model.model." + path + ".lora_B.weight", {w->shape[0], spec.rank});
    }
  return layout;
}

LoadedAdapter load_peft_adapter(const fs::path& dir, const ModelConfig& config) {
  const fs::path cfg_path = dir / "adapter_config.json", weights_path = dir / "adapter_model.safetensors";
  if (!fs::is_regular_file(cfg_path))
    throw UserError("LoRA adapter '" + dir.string() + "': no adapter_config.json (a PEFT adapter directory holds it)");
  const nlohmann::json c = io::read_json_file(cfg_path);
  const std::string where = cfg_path.string();
  if (!c.is_object()) throw UserError(where + ": not a JSON object");
  const auto fail = [&](const std::string& key, const std::string& why) -> void {
    throw UserError(where + ": key '" + key + "' " + why);
  };
  LoadedAdapter out;
  for (const auto& [key, v] : c.items()) {
    if (key == "peft_type") {
      if (!v.is_string() || v.get<std::string>() != "LORA")
        fail(key, "is " + v.dump() + "; unstuck loads LORA adapters");
    } else if (key == "r") {
      if (!v.is_number_integer() || v.get<int64_t>() <= 0) fail(key, "must be a positive integer, got " + v.dump());
      out.spec.rank = v.get<int64_t>();
    } else if (key == "lora_alpha") {
      if (!v.is_number() || v.get<double>() <= 0) fail(key, "must be a positive number, got " + v.dump());
      out.spec.alpha = v.get<double>();
    } else if (key == "use_rslora") {
      if (!v.is_boolean()) fail(key, "must be true or false, got " + v.dump());
      out.spec.rslora = v.get<bool>();
    } else if (key == "bias") {
      if (v != "none") fail(key, "is " + v.dump() + ": adapters with trained biases are not computed (only \"none\")");
    } else if (key == "target_modules") {
      std::vector<std::string> names;
      if (v.is_string() && v.get<std::string>() == "all-linear") {
        for (const char* n : kModuleNames) names.push_back(n);
      } else if (v.is_array()) {
        for (const auto& n : v) {
          if (!n.is_string()) fail(key, "must list module names, got " + v.dump());
          names.push_back(n.get<std::string>());
        }
      } else {
        fail(key,
             "is " + v.dump() + ": a list of module names or \"all-linear\" (a regular expression is not matched)");
      }
      out.spec.targets = match_targets(names, config, where + ": target_modules");
    } else if (!kInformational.count(key) && !is_off(v)) {
      fail(key, "is " + v.dump() +
                    ", a setting unstuck does not compute (DoRA, layer selections, patterns, saved "
                    "modules and the like); only its off value is accepted");
    }
  }
  if (out.spec.rank <= 0) throw UserError(where + ": no 'r'");
  if (out.spec.alpha <= 0) throw UserError(where + ": no 'lora_alpha'");
  if (out.spec.targets.empty()) throw UserError(where + ": no 'target_modules'");
  if (!fs::is_regular_file(weights_path))
    throw UserError("LoRA adapter '" + dir.string() + "': no adapter_model.safetensors" +
                    (fs::exists(dir / "adapter_model.bin") ? " (adapter_model.bin, a pickle, is not read)" : ""));
  const io::SafetensorsFile file = io::read_safetensors(weights_path);
  const ParamLayout layout = lora_layout(config, out.spec);
  out.flat = torch::zeros({layout.total}, torch::kFloat32);
  std::set<std::string> expected;
  for (const ParamEntry& e : layout.entries) {
    expected.insert(e.name);
    const io::Tensor* t = file.find(e.name);
    if (!t)
      throw UserError(weights_path.string() + ": no tensor '" + e.name + "' (r " + std::to_string(out.spec.rank) + ")");
    if (t->shape != e.shape)
      throw UserError(weights_path.string() + ": tensor '" + e.name + "' has shape " + nlohmann::json(t->shape).dump() +
                      ", the model needs " + nlohmann::json(e.shape).dump());
    const torch::Tensor src = torch::from_blob(const_cast<uint8_t*>(t->bytes.data()), {e.numel}, torch_dtype(t->dtype));
    out.flat.narrow(0, e.offset, e.numel).copy_(src);
  }
  for (const io::Tensor& t : file.tensors)
    if (!expected.count(t.name))
      throw UserError(weights_path.string() + ": tensor '" + t.name +
                      "' is not an adapter of the configured targets (unstuck adapts q/k/v/o and gate/up/down only)");
  return out;
}

void save_peft_adapter(const fs::path& dir, const ModelConfig& config, const LoraSpec& spec, const torch::Tensor& flat,
                       const std::string& base_model) {
  const ParamLayout layout = lora_layout(config, spec);
  if (flat.numel() != layout.total) throw std::invalid_argument("save_peft_adapter: the buffer is not lora_layout's");
  const torch::Tensor host = flat.detach().to(torch::kCPU).contiguous();
  fs::create_directories(dir);
  io::write_safetensors(dir / "adapter_model.safetensors", layout_views(layout, host, io_dtype(host.scalar_type())),
                        {{"format", "pt"}});
  nlohmann::json targets = nlohmann::json::array();
  for (LoraModule m : spec.targets) targets.push_back(lora_module_name(m));
  const nlohmann::json c = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", spec.rank},
      {"lora_alpha", spec.alpha},
      {"use_rslora", spec.rslora},
      {"target_modules", targets},
      {"bias", "none"},
      {"lora_dropout", spec.dropout},
      {"fan_in_fan_out", false},
      {"use_dora", false},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"base_model_name_or_path", base_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(base_model)},
      {"inference_mode", true}};
  io::write_json_file(dir / "adapter_config.json", c);
}

torch::Tensor merge_lora(const ModelConfig& config, const torch::Tensor& base_flat, const LoraSpec& spec,
                         const torch::Tensor& adapter_flat) {
  const ParamLayout base = llama_layout(config), layout = lora_layout(config, spec);
  if (base_flat.numel() != base.total || adapter_flat.numel() != layout.total)
    throw std::invalid_argument("merge_lora: buffers do not match the layouts");
  torch::NoGradGuard no_grad;
  torch::Tensor merged = base_flat.to(torch::kFloat32).clone();
  const torch::Tensor adapters = adapter_flat.to(torch::kFloat32);
  for_each_adapted(config, spec, layout, base, [&](const ParamEntry& a, const ParamEntry& b, const ParamEntry& w) {
    const torch::Tensor delta = at::matmul(adapters.narrow(0, b.offset, b.numel).view(b.shape),
                                           adapters.narrow(0, a.offset, a.numel).view(a.shape)) *
                                spec.scaling();
    merged.narrow(0, w.offset, w.numel).view(w.shape).add_(delta);
  });
  return merged;
}

}  // namespace unstuck::model
