// Model directories in the Hugging Face layout: config.json (see hf_config.h) and weights in
// model.safetensors or sharded model-0000i-of-0000N.safetensors + model.safetensors.index.json,
// loadable by transformers and by us. Weights load memory-mapped into an FP32 flat buffer.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "unstuck/io/safetensors.h"
#include "unstuck/model/hf_config.h"
#include "unstuck/model/model_config.h"
#include "unstuck/model/param_layout.h"
#include "unstuck/precision/weight_format.h"

namespace unstuck::model {

struct LoadedModel {
  ModelConfig config;
  torch::Tensor flat;  // FP32, llama_layout(config).total elements
  SpecialTokens tokens;
  std::string dtype;  // config.json's torch_dtype / dtype, empty when absent
};

// Loads dir/config.json and the weights (F32, BF16 or F16 tensors; single file or sharded). The
// config is validated and checked against the checkpoint's tensor headers before anything is
// allocated. A missing or extra tensor, a shape mismatch, a NaN or infinite weight, or a layer
// count / vocabulary that disagrees with the tensors throws UserError naming the file and tensor.
LoadedModel load_pretrained(const std::filesystem::path& dir);
// The same with dir/config.json already parsed (`hf`, from read_hf_config): a run's plan reads it
// once, before the weights.
LoadedModel load_pretrained(const std::filesystem::path& dir, const HfConfig& hf);

// Writes dir/config.json and the weights with tensors in `dtype`: a flat buffer already in that
// dtype is written bit for bit; an FP32 one is rounded to nearest. `max_shard_bytes` > 0 shards the
// weights (with model.safetensors.index.json) when they exceed it. Each file is written atomically.
void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config, const torch::Tensor& flat,
                     io::DType dtype, const SpecialTokens& tokens, uint64_t max_shard_bytes = 0);
// The same from `fill(begin, n, out)`, which writes elements [begin, begin + n) of the flat buffer
// in `dtype` into out: asked a bounded block at a time, so the weights never exist whole in memory.
using FlatFill = std::function<void(int64_t begin, int64_t n, void* out)>;
void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config, const FlatFill& fill, io::DType dtype,
                     const SpecialTokens& tokens, uint64_t max_shard_bytes = 0);

// Ranges of a model directory's weights as the flat FP32 buffer of load_pretrained(), read from the
// files again when they are needed (pread: the bytes go through the page cache, never into this
// process's memory as a whole). The trainer uses it to compare the weights with the start policy's
// without keeping a copy. Files replaced by rename keep their first contents (the descriptors stay
// open); a file changed in place or truncated makes read() throw UserError naming it.
class FlatWeightsReader {
 public:
  // `config`: the model load_pretrained(dir) returned (its layout names the tensors).
  FlatWeightsReader(const std::filesystem::path& dir, const ModelConfig& config);
  ~FlatWeightsReader();
  FlatWeightsReader(const FlatWeightsReader&) = delete;
  FlatWeightsReader& operator=(const FlatWeightsReader&) = delete;

  // Flat elements [begin, begin + n) widened to FP32 into out[0, n) (alignment gaps: 0).
  void read(int64_t begin, int64_t n, float* out) const;

 private:
  struct File {
    std::string path;
    int fd = -1;
    int64_t size = 0, mtime_ns = 0;
  };
  struct Piece {                    // one tensor of the layout
    int64_t offset = 0, numel = 0;  // in the flat buffer
    std::size_t file = 0;
    uint64_t data_offset = 0;  // bytes into the file
    io::DType dtype = io::DType::f32;
  };
  std::vector<File> files_;
  std::vector<Piece> pieces_;  // ascending offsets
};

// The compute weights of an FP8 run (`compute`: layout.total BF16 patterns, FP8 channels on their
// grids) as compressed-tensors' "float-quantized" safetensors in `dir` (shards of at most
// shard_bytes): each FP8 channel matrix as E4M3FN codes with `<name>_scale` (rows, 1) BF16 holding
// 2^e, every other tensor BF16; code x scale is the compute weight bit for bit. Throws UserError
// naming the tensor when a row's scale is outside BF16's normal range. config.json is the caller's.
void save_fp8_weights(const std::filesystem::path& dir, const ParamLayout& layout, const uint16_t* compute,
                      const precision::Fp8Channels& channels, uint64_t shard_bytes);

torch::ScalarType torch_dtype(io::DType dtype);
// The inverse for F32, BF16 and F16; another scalar type throws std::invalid_argument.
io::DType io_dtype(torch::ScalarType type);
const char* hf_dtype_name(io::DType dtype);  // "float32", "bfloat16", "float16"

// One safetensors view per tensor of `layout`, named as the layout names it, into `flat`: a
// contiguous host buffer of layout.total elements in `dtype` that outlives the views.
std::vector<io::TensorView> layout_views(const ParamLayout& layout, const torch::Tensor& flat, io::DType dtype);

}  // namespace unstuck::model
