// FP8 compute weights as compressed-tensors' float-quantized safetensors (model/model_io.h).
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/io/safetensors_dir.h"
#include "unstuck/model/model_io.h"
#include "unstuck/precision/fp8.h"
#include "unstuck/precision/round_math.h"

namespace unstuck::model {

void save_fp8_weights(const std::filesystem::path& dir, const ParamLayout& layout, const uint16_t* compute,
                      const precision::Fp8Channels& channels, uint64_t shard_bytes) {
  std::map<uint64_t, const precision::Fp8Matrix*> matrix_at;
  for (const precision::Fp8Matrix& m : channels.matrices) matrix_at[m.offset] = &m;
  std::vector<std::vector<uint8_t>> codes;  // one per FP8 matrix, kept alive for the views
  std::vector<std::vector<uint16_t>> scales;
  codes.reserve(channels.matrices.size());
  scales.reserve(channels.matrices.size());
  std::vector<io::TensorView> views;
  for (const ParamEntry& e : layout.entries) {
    const auto it = matrix_at.find(uint64_t(e.offset));
    if (it == matrix_at.end()) {
      views.push_back({e.name, io::DType::bf16, e.shape, compute + e.offset, std::size_t(e.numel) * 2});
      continue;
    }
    const precision::Fp8Matrix& m = *it->second;
    const std::string suffix = ".weight";
    if (e.name.size() < suffix.size() || e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      throw std::logic_error("FP8 export: channel matrix '" + e.name + "' is not a .weight");
    std::vector<uint8_t>& c = codes.emplace_back(std::size_t(e.numel));
    std::vector<uint16_t>& s = scales.emplace_back(std::size_t(m.rows));
    for (uint64_t r = 0; r < m.rows; ++r) {
      const int exp = channels.exponent[std::size_t(m.first_row + r)];
      if (exp < -126 || exp > 127)  // 2^exp must be a normal BF16 (the scale's dtype)
        throw UserError("export --format fp8: row " + std::to_string(r) + " of '" + e.name + "' has the scale 2^" +
                        std::to_string(exp) +
                        ", outside BF16's normal range (its largest |w| is near 0); use --format hf");
      s[std::size_t(r)] = uint16_t(precision::float_bits(std::ldexp(1.0f, exp)) >> 16);
      for (uint64_t k = r * m.cols; k < (r + 1) * m.cols; ++k)
        c[std::size_t(k)] = precision::fp8_e4m3_code(compute[std::size_t(e.offset) + k], exp);
    }
    views.push_back({e.name, io::DType::f8_e4m3, e.shape, c.data(), c.size()});
    views.push_back({e.name + "_scale", io::DType::bf16, {int64_t(m.rows), 1}, s.data(), s.size() * 2});
  }
  io::write_safetensors_dir(dir, views, shard_bytes, {{"format", "pt"}});
}

}  // namespace unstuck::model
