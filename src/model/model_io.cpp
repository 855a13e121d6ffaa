// Hugging Face model directories: config.json and (sharded) safetensors weights to and from the
// flat parameter buffer. Loading checks the config against the tensor headers before allocating.
#include "unstuck/model/model_io.h"

#include <ATen/ATen.h>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors_dir.h"
#include "unstuck/model/param_layout.h"

namespace unstuck::model {
torch::ScalarType torch_dtype(io::DType d) {
  switch (d) {
    case io::DType::f32: return torch::kFloat32;
    case io::DType::bf16: return torch::kBFloat16;
    case io::DType::f16: return torch::kHalf;
  }
  return torch::kFloat32;
}

const char* hf_dtype_name(io::DType d) {
  switch (d) {
    case io::DType::f32: return "float32";
    case io::DType::bf16: return "bfloat16";
    case io::DType::f16: return "float16";
  }
  return "float32";
}

LoadedModel load_pretrained(const std::filesystem::path& dir) {
  const std::filesystem::path config_path = dir / "config.json";
  const HfConfig hf = read_hf_config(config_path);
  LoadedModel out;
  out.config = hf.model;
  out.tokens = hf.tokens;
  out.dtype = hf.dtype;

  const io::SafetensorsDir weights(dir);
  check_weights_match(out.config, weights, config_path.string());  // before allocating anything
  const ParamLayout layout = llama_layout(out.config);

  out.flat = torch::zeros({layout.total}, torch::kFloat32);
  for (const ParamEntry& e : layout.entries) {
    const io::TensorView* t = weights.find(e.name);
    const torch::Tensor src = torch::from_blob(const_cast<void*>(t->data), e.shape, torch_dtype(t->dtype));
    torch::Tensor dst = out.flat.narrow(0, e.offset, e.numel);
    dst.copy_(src.reshape({-1}));
    if (!torch::isfinite(dst).all().item<bool>())
      throw UserError(weights.file_of(e.name) + ": tensor '" + e.name + "' holds NaN or infinite values");
  }
  return out;
}

void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config, const torch::Tensor& flat,
                     io::DType dtype, const SpecialTokens& tokens, uint64_t max_shard_bytes) {
  const ParamLayout layout = llama_layout(config);
  const auto st = flat.scalar_type();
  if (flat.numel() != layout.total || (st != torch::kFloat32 && st != torch_dtype(dtype)))
    throw UserError("save_pretrained: expected an FP32 or " + std::string(hf_dtype_name(dtype)) + " flat buffer of " +
                    std::to_string(layout.total) + " elements");
  const torch::Tensor converted = flat.detach().to(torch::kCPU).contiguous().to(torch_dtype(dtype));
  const auto elem = converted.element_size();
  const char* base = static_cast<const char*>(converted.data_ptr());
  std::vector<io::TensorView> views;
  for (const ParamEntry& e : layout.entries)
    views.push_back({e.name, dtype, e.shape, base + e.offset * elem, std::size_t(e.numel) * elem});
  io::write_safetensors_dir(dir, views, max_shard_bytes, {{"format", "pt"}});
  io::write_json_file(dir / "config.json", hf_config_json(config, tokens, hf_dtype_name(dtype)));
}

}  // namespace unstuck::model
