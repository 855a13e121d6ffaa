// Hugging Face model directories: config.json and (sharded) safetensors weights to and from the
// flat parameter buffer. Loading checks the config against the tensor headers before allocating.
#include "unstuck/model/model_io.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/io/safetensors_dir.h"
#include "unstuck/model/lazy_zeros.h"
#include "unstuck/model/param_layout.h"
#include "unstuck/precision/round_math.h"
#include "unstuck/precision/rounding.h"

namespace unstuck::model {
torch::ScalarType torch_dtype(io::DType d) {
  switch (d) {
    case io::DType::f32:
      return torch::kFloat32;
    case io::DType::bf16:
      return torch::kBFloat16;
    case io::DType::f16:
      return torch::kHalf;
    case io::DType::f8_e4m3:
      return torch::kFloat8_e4m3fn;
  }
  return torch::kFloat32;
}

io::DType io_dtype(torch::ScalarType type) {
  if (type == torch::kFloat32) return io::DType::f32;
  if (type == torch::kBFloat16) return io::DType::bf16;
  if (type == torch::kHalf) return io::DType::f16;
  throw std::invalid_argument(std::string("io_dtype: no safetensors dtype for ") + c10::toString(type));
}

std::vector<io::TensorView> layout_views(const ParamLayout& layout, const torch::Tensor& flat, io::DType dtype) {
  if (!flat.is_cpu() || !flat.is_contiguous() || flat.numel() != layout.total ||
      flat.scalar_type() != torch_dtype(dtype))
    throw std::invalid_argument("layout_views: expected a contiguous host buffer of the layout in its dtype");
  const auto elem = flat.element_size();
  const char* base = static_cast<const char*>(flat.data_ptr());
  std::vector<io::TensorView> views;
  for (const ParamEntry& e : layout.entries)
    views.push_back({e.name, dtype, e.shape, base + e.offset * elem, std::size_t(e.numel) * elem});
  return views;
}

const char* hf_dtype_name(io::DType d) {
  switch (d) {
    case io::DType::f32:
      return "float32";
    case io::DType::bf16:
      return "bfloat16";
    case io::DType::f16:
      return "float16";
    case io::DType::f8_e4m3:
      return "float8_e4m3fn";
  }
  return "float32";
}

LoadedModel load_pretrained(const std::filesystem::path& dir) {
  return load_pretrained(dir, read_hf_config(dir / "config.json"));
}

LoadedModel load_pretrained(const std::filesystem::path& dir, const HfConfig& hf) {
  const std::filesystem::path config_path = dir / "config.json";
  LoadedModel out;
  out.config = hf.model;
  out.tokens = hf.tokens;
  out.dtype = hf.dtype;

  const io::SafetensorsDir weights(dir);
  check_weights_match(out.config, weights, config_path.string());  // before allocating anything
  const ParamLayout layout = llama_layout(out.config);

  out.flat = lazy_zeros(layout.total, torch::kFloat32);  // each page touched once, by its tensor's copy
  for (const ParamEntry& e : layout.entries) {
    const io::TensorView* t = weights.find(e.name);
    const torch::Tensor src = torch::from_blob(const_cast<void*>(t->data), e.shape, torch_dtype(t->dtype));
    torch::Tensor dst = out.flat.narrow(0, e.offset, e.numel);
    dst.copy_(src.reshape({-1}));
    if (precision::count_nonfinite(dst.data_ptr<float>(), std::size_t(e.numel)) > 0)
      throw UserError(weights.file_of(e.name) + ": tensor '" + e.name + "' holds NaN or infinite values");
  }
  return out;
}

namespace {

int64_t mtime_ns(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec; }

}  // namespace

FlatWeightsReader::FlatWeightsReader(const std::filesystem::path& dir, const ModelConfig& config) {
  const io::SafetensorsDir weights(dir);
  std::map<std::string, std::size_t> file_index;
  for (const ParamEntry& e : llama_layout(config).entries) {
    const io::TensorView* t = weights.find(e.name);
    if (!t || io::numel(t->shape) != e.numel)
      throw UserError(weights.source() + ": tensor '" + e.name + "' is missing or changed shape");
    const std::string& path = weights.file_of(e.name);
    auto [it, added] = file_index.emplace(path, files_.size());
    if (added) {
      File f;
      f.path = path;
      f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      struct stat st {};
      if (f.fd < 0 || ::fstat(f.fd, &st) != 0) {
        if (f.fd >= 0) ::close(f.fd);
        throw UserError("cannot open '" + path + "': " + std::strerror(errno));
      }
      f.size = int64_t(st.st_size);
      f.mtime_ns = mtime_ns(st);
      files_.push_back(f);
    }
    pieces_.push_back({e.offset, e.numel, it->second, weights.file_offset(e.name), t->dtype});
  }
  std::sort(pieces_.begin(), pieces_.end(), [](const Piece& a, const Piece& b) { return a.offset < b.offset; });
}

FlatWeightsReader::~FlatWeightsReader() {
  for (const File& f : files_) ::close(f.fd);
}

void FlatWeightsReader::read(int64_t begin, int64_t n, float* out) const {
  std::fill(out, out + n, 0.0f);
  for (const File& f : files_) {
    struct stat st {};
    if (::fstat(f.fd, &st) != 0 || int64_t(st.st_size) != f.size || mtime_ns(st) != f.mtime_ns)
      throw UserError("'" + f.path + "' changed since the run started (the base model's weights must stay as loaded)");
  }
  std::vector<uint8_t> bytes;
  for (const Piece& p : pieces_) {
    const int64_t b = std::max(begin, p.offset), e = std::min(begin + n, p.offset + p.numel);
    if (b >= e) continue;
    const std::size_t elem = io::dtype_size(p.dtype), len = std::size_t(e - b) * elem;
    bytes.resize(len);
    const File& f = files_[p.file];
    for (std::size_t done = 0; done < len;) {
      const ssize_t got =
          ::pread(f.fd, bytes.data() + done, len - done, off_t(p.data_offset + uint64_t(b - p.offset) * elem + done));
      if (got <= 0)
        throw UserError("cannot read '" + f.path + "'" +
                        (got < 0 ? std::string(": ") + std::strerror(errno) : ": truncated"));
      done += std::size_t(got);
    }
    float* dst = out + (b - begin);
    const std::size_t count = std::size_t(e - b);
    if (p.dtype == io::DType::f32) {
      std::memcpy(dst, bytes.data(), len);
    } else {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(bytes.data());
      for (std::size_t i = 0; i < count; ++i)
        dst[i] = p.dtype == io::DType::bf16 ? precision::bf16_to_float(h[i]) : precision::fp16_to_float(h[i]);
    }
  }
}

void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config, const torch::Tensor& flat,
                     io::DType dtype, const SpecialTokens& tokens, uint64_t max_shard_bytes) {
  const ParamLayout layout = llama_layout(config);
  const auto st = flat.scalar_type();
  if (flat.numel() != layout.total || (st != torch::kFloat32 && st != torch_dtype(dtype)))
    throw UserError("save_pretrained: expected an FP32 or " + std::string(hf_dtype_name(dtype)) + " flat buffer of " +
                    std::to_string(layout.total) + " elements");
  const torch::Tensor converted = flat.detach().to(torch::kCPU).contiguous().to(torch_dtype(dtype));
  io::write_safetensors_dir(dir, layout_views(layout, converted, dtype), max_shard_bytes, {{"format", "pt"}});
  io::write_json_file(dir / "config.json", hf_config_json(config, tokens, hf_dtype_name(dtype)));
}

void save_pretrained(const std::filesystem::path& dir, const ModelConfig& config, const FlatFill& fill, io::DType dtype,
                     const SpecialTokens& tokens, uint64_t max_shard_bytes) {
  const ParamLayout layout = llama_layout(config);
  const std::size_t elem = io::dtype_size(dtype);
  std::vector<io::TensorView> views;
  std::map<std::string, int64_t> offsets;
  for (const ParamEntry& e : layout.entries) {
    views.push_back({e.name, dtype, e.shape, nullptr, std::size_t(e.numel) * elem});
    offsets[e.name] = e.offset;
  }
  const io::TensorFill bytes = [&](const io::TensorView& t, std::size_t at, std::size_t n, void* out) {
    fill(offsets.at(t.name) + int64_t(at / elem), int64_t(n / elem), out);
  };
  io::write_safetensors_dir(dir, std::move(views), max_shard_bytes, {{"format", "pt"}}, bytes);
  io::write_json_file(dir / "config.json", hf_config_json(config, tokens, hf_dtype_name(dtype)));
}

}  // namespace unstuck::model
