// Safetensors files (the Hugging Face weight format) in plain C++17: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {str: str}}, then the
// tensors' bytes. We read and write F32, BF16 and F16; files with other dtypes are rejected with
// the tensor named. Every malformed-file error is a UserError naming the file (docs/MODEL_IO.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace unstuck::io {

// f8_e4m3 (E4M3FN codes) is written only (the FP8 export); reading a file refuses it with the other
// dtypes unstuck does not load.
enum class DType { f32, bf16, f16, f8_e4m3 };

const char* dtype_name(DType dtype);  // safetensors spelling: "F32", "BF16", "F16", "F8_E4M3"
std::size_t dtype_size(DType dtype);  // bytes per element

// Number of elements of `shape` ([] is a scalar: 1 element).
int64_t numel(const std::vector<int64_t>& shape);

// A tensor read from a file; owns its bytes (little-endian, row-major).
struct Tensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // numel(shape) * dtype_size(dtype) bytes
};

// A tensor to write: points at bytes the caller keeps alive during write_safetensors(), e.g. a
// range of the flat compute buffer.
struct TensorView {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;  // must equal numel(shape) * dtype_size(dtype)
};

TensorView view_of(const Tensor& tensor);

struct SafetensorsFile {
  std::string path;                             // where it was read from, for messages
  std::vector<Tensor> tensors;                  // in the order of their data in the file
  std::map<std::string, std::string> metadata;  // the "__metadata__" entry, empty when absent

  const Tensor* find(std::string_view name) const;  // nullptr when absent
  const Tensor& at(std::string_view name) const;    // throws UserError naming file and tensor
};

// Limit on the JSON header, as in the reference implementation: a larger length field means the
// file is not a safetensors file (or is corrupt).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Reads a whole file. Throws UserError naming the file (and the tensor where one is at fault) when
// it is missing, truncated, has an oversized or malformed header, an unknown or unsupported dtype,
// a shape that does not match its byte range, or byte ranges that overlap, leave gaps or run past
// the end of the file.
SafetensorsFile read_safetensors(const std::filesystem::path& path);

// A safetensors file memory-mapped read-only: the header is validated as read_safetensors does,
// and each tensor's bytes are read straight from the page cache (no copy of a multi-GB file).
// Tensor views stay valid while this object lives.
class MappedSafetensors {
 public:
  explicit MappedSafetensors(const std::filesystem::path& path);
  ~MappedSafetensors();
  MappedSafetensors(const MappedSafetensors&) = delete;
  MappedSafetensors& operator=(const MappedSafetensors&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }  // in file order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* find(std::string_view name) const;  // nullptr when absent
  // Byte offset of a tensor's data in the file (for reading it with pread instead of the mapping).
  uint64_t file_offset(const TensorView& tensor) const {
    return uint64_t(static_cast<const uint8_t*>(tensor.data) - base_);
  }

 private:
  std::string path_;
  const uint8_t* base_ = nullptr;
  std::size_t size_ = 0;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Writes bytes [offset, offset + n) of tensor `t` into `out`: the data of a tensor written without
// `data`, asked for a bounded block at a time (whole elements).
using TensorFill = std::function<void(const TensorView& t, std::size_t offset, std::size_t n, void* out)>;

// Writes `tensors` (sorted by name, data in that order, header padded with spaces to a multiple
// of 8 bytes) and `metadata` to `path`, atomically: a failed write leaves an existing file intact.
// A tensor whose `data` is null gets its bytes from `fill`, 64 MiB at a time, so a file can be
// written from data that never exists whole in memory. Throws UserError for duplicate or empty
// names and byte counts that do not match the shape.
void write_safetensors(const std::filesystem::path& path, std::vector<TensorView> tensors,
                       const std::map<std::string, std::string>& metadata = {}, const TensorFill& fill = {});

}  // namespace unstuck::io
