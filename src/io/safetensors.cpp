// Safetensors reader and writer. The reader validates the header the way the reference (Rust)
// implementation does: byte ranges sorted by offset must tile the data section exactly, with no
// overlap, gap or trailing bytes; each range must match its shape and dtype.
#include "unstuck/io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "unstuck/common/error.h"
#include "io/atomic_file.h"
#include "unstuck/io/json_file.h"

// Tensor bytes are copied as they are: the file is little-endian, and so must the host be.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace unstuck::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kLengthBytes = 8;  // the header-length field

// Dtypes of the safetensors format that we recognize but do not load.
constexpr const char* kUnsupportedDtypes[] = {"BOOL",    "U8",      "I8",      "I16", "U16",     "I32",
                                              "U32",     "I64",     "U64",     "F64", "F8_E4M3", "F8_E5M2",
                                              "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};

// One header entry with its byte range relative to the start of the data section.
struct Entry {
  Tensor tensor;
  uint64_t begin = 0;
  uint64_t end = 0;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

std::string range_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Parses and checks everything about one tensor that does not depend on the other tensors.
class HeaderParser {
 public:
  HeaderParser(std::string file, uint64_t data_size) : file_(std::move(file)), data_size_(data_size) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw UserError("safetensors file '" + file_ + "': " + what);
  }
  [[noreturn]] void fail(const std::string& name, const std::string& what) const {
    fail("tensor '" + name + "' " + what);
  }

  DType parse_dtype(const std::string& name, const json& value) const {
    if (!value.is_string()) fail(name, "has a dtype that is not a string");
    const std::string dtype = value.get<std::string>();
    for (DType d : {DType::f32, DType::bf16, DType::f16}) {
      if (dtype == dtype_name(d)) return d;
    }
    for (const char* unsupported : kUnsupportedDtypes) {
      if (dtype == unsupported) {
        fail(name, "has dtype " + dtype + ", which unstuck does not load (supported: F32, BF16, F16)");
      }
    }
    fail(name, "has unknown dtype '" + dtype + "' (supported: F32, BF16, F16)");
  }

  std::vector<uint64_t> parse_unsigned_list(const std::string& name, const json& value, const char* key) const {
    if (!value.is_array()) fail(name, std::string("has a ") + key + " that is not a list");
    std::vector<uint64_t> out;
    for (const json& v : value) {
      if (!v.is_number_unsigned()) {
        fail(name, std::string("has ") + key + " " + value.dump() + "; expected non-negative integers");
      }
      out.push_back(v.get<uint64_t>());
    }
    return out;
  }

  Entry parse_entry(const std::string& name, const json& value) const {
    if (!value.is_object()) fail(name, "is not a JSON object");
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(key)) fail(name, std::string("has no \"") + key + "\"");
    }
    Entry entry;
    entry.tensor.name = name;
    entry.tensor.dtype = parse_dtype(name, value["dtype"]);
    uint64_t elements = 1;
    for (uint64_t dim : parse_unsigned_list(name, value["shape"], "shape")) {
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / 16 / dim)) {
        fail(name, "has shape " + value["shape"].dump() + ", too large");
      }
      elements *= dim;
      entry.tensor.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto offsets = parse_unsigned_list(name, value["data_offsets"], "data_offsets");
    if (offsets.size() != 2) fail(name, "has data_offsets that are not [begin, end]");
    entry.begin = offsets[0];
    entry.end = offsets[1];
    const std::string range = range_text(entry.begin, entry.end);
    if (entry.end < entry.begin) {
      fail(name, "has data_offsets " + range + " that end before they begin");
    }
    const uint64_t needed = elements * dtype_size(entry.tensor.dtype);
    if (entry.end - entry.begin != needed) {
      fail(name, "has shape " + shape_text(entry.tensor.shape) + " of " + dtype_name(entry.tensor.dtype) +
                     ", which needs " + std::to_string(needed) + " bytes, but data_offsets " + range + " cover " +
                     std::to_string(entry.end - entry.begin));
    }
    if (entry.end > data_size_) {
      fail(name, "has data_offsets " + range + " beyond the " + std::to_string(data_size_) +
                     " bytes of data after the header: the file is truncated");
    }
    return entry;
  }

  std::map<std::string, std::string> parse_metadata(const json& value) const {
    std::map<std::string, std::string> metadata;
    if (value.is_null()) return metadata;
    if (!value.is_object()) fail("\"__metadata__\" is not a JSON object");
    for (const auto& [key, v] : value.items()) {
      if (!v.is_string()) fail("\"__metadata__\" entry '" + key + "' is not a string");
      metadata[key] = v.get<std::string>();
    }
    return metadata;
  }

 private:
  std::string file_;
  uint64_t data_size_;
};

// Sorted by offset, the byte ranges must tile [0, data_size) exactly.
void check_layout(const HeaderParser& parser, const std::vector<Entry>& entries, uint64_t data_size) {
  uint64_t expected = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < expected) {
      parser.fail(e.tensor.name, "has data_offsets " + range_text(e.begin, e.end) + " overlapping those of '" +
                                     previous->tensor.name + "' " + range_text(previous->begin, previous->end));
    }
    if (e.begin > expected) {
      parser.fail(e.tensor.name, "has data_offsets " + range_text(e.begin, e.end) + " leaving a gap after byte " +
                                     std::to_string(expected) + "; tensor data must be contiguous");
    }
    expected = e.end;
    previous = &e;
  }
  if (expected != data_size) {
    parser.fail(std::to_string(data_size - expected) +
                " bytes follow the last tensor's data; the header does not describe them");
  }
}

}  // namespace

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::f8_e4m3:
      return "F8_E4M3";
  }
  return "?";
}

std::size_t dtype_size(DType dtype) { return dtype == DType::f32 ? 4 : dtype == DType::f8_e4m3 ? 1 : 2; }

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TensorView view_of(const Tensor& tensor) {
  return TensorView{tensor.name, tensor.dtype, tensor.shape, tensor.bytes.data(), tensor.bytes.size()};
}

const Tensor* SafetensorsFile::find(std::string_view name) const {
  for (const Tensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const Tensor& SafetensorsFile::at(std::string_view name) const {
  const Tensor* t = find(name);
  if (t == nullptr) {
    throw UserError("safetensors file '" + path + "' has no tensor '" + std::string(name) + "'");
  }
  return *t;
}

namespace {

// The validated header of a safetensors file: entries sorted by offset (they tile the data
// section), the metadata, and where the data section starts.
struct ParsedHeader {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

// Reads and validates the header of `path` from `in` (positioned at the start).
ParsedHeader read_header(const fs::path& path, std::istream& in, uint64_t file_size) {
  const std::string file = path.string();
  const std::string prefix = "safetensors file '" + file + "'";
  if (file_size < kLengthBytes) {
    throw UserError(prefix + " is truncated: " + std::to_string(file_size) +
                    " bytes, shorter than the 8-byte header length");
  }
  unsigned char length_field[kLengthBytes];
  in.read(reinterpret_cast<char*>(length_field), kLengthBytes);
  uint64_t header_size = 0;
  for (uint64_t i = kLengthBytes; i-- > 0;) header_size = (header_size << 8) | length_field[i];
  if (header_size > kMaxSafetensorsHeaderBytes) {
    throw UserError(prefix + " declares a " + std::to_string(header_size) + "-byte JSON header, over the limit of " +
                    std::to_string(kMaxSafetensorsHeaderBytes) + "; is it a safetensors file?");
  }
  if (header_size > file_size - kLengthBytes) {
    throw UserError(prefix + " is truncated: it declares a " + std::to_string(header_size) +
                    "-byte JSON header but only " + std::to_string(file_size - kLengthBytes) + " bytes follow");
  }
  std::string header_text(header_size, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_size));
  if (!in) throw UserError(prefix + " could not be read");

  json header;
  check_json_depth(header_text, prefix + "'s header");
  try {
    header = json::parse(header_text);
  } catch (const json::exception& e) {  // parse_error, out_of_range (a number such as 1e400)
    std::string why = e.what();         // "[json.exception.parse_error.101] parse error at ..."
    const auto at = why.find("] ");
    if (at != std::string::npos) why = why.substr(at + 2);
    throw UserError(prefix + " has a malformed JSON header: " + why);
  }
  const uint64_t data_size = file_size - kLengthBytes - header_size;
  HeaderParser parser(file, data_size);
  if (!header.is_object()) parser.fail("the JSON header is not an object");

  ParsedHeader result;
  result.data_start = kLengthBytes + header_size;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      result.metadata = parser.parse_metadata(value);
    } else {
      result.entries.push_back(parser.parse_entry(name, value));
    }
  }
  std::sort(result.entries.begin(), result.entries.end(), [](const Entry& a, const Entry& b) {
    return std::make_pair(a.begin, a.end) < std::make_pair(b.begin, b.end);
  });
  check_layout(parser, result.entries, data_size);
  return result;
}

uint64_t checked_file_size(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw UserError("safetensors file '" + path.string() + "' not found");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) throw UserError("safetensors file '" + path.string() + "' cannot be opened");
  return size;
}

}  // namespace

SafetensorsFile read_safetensors(const fs::path& path) {
  const uint64_t file_size = checked_file_size(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("safetensors file '" + path.string() + "' cannot be opened");
  ParsedHeader header = read_header(path, in, file_size);
  SafetensorsFile result;
  result.path = path.string();
  result.metadata = std::move(header.metadata);
  // The ranges tile the data section in this order, so one sequential read fills every tensor.
  for (Entry& e : header.entries) {
    e.tensor.bytes.resize(e.end - e.begin);
    in.read(reinterpret_cast<char*>(e.tensor.bytes.data()), static_cast<std::streamsize>(e.tensor.bytes.size()));
    if (!in)
      throw UserError("safetensors file '" + path.string() + "' could not be read (tensor '" + e.tensor.name + "')");
    result.tensors.push_back(std::move(e.tensor));
  }
  return result;
}

MappedSafetensors::MappedSafetensors(const fs::path& path) : path_(path.string()) {
  const uint64_t file_size = checked_file_size(path);
  ParsedHeader header;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw UserError("safetensors file '" + path_ + "' cannot be opened");
    header = read_header(path, in, file_size);
  }
  metadata_ = std::move(header.metadata);
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw UserError("safetensors file '" + path_ + "' cannot be opened");
  size_ = static_cast<std::size_t>(file_size);
  void* map = size_ > 0 ? ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
  ::close(fd);
  if (map == MAP_FAILED) throw UserError("safetensors file '" + path_ + "' cannot be memory-mapped");
  base_ = static_cast<const uint8_t*>(map);
  for (Entry& e : header.entries) {
    tensors_.push_back({std::move(e.tensor.name), e.tensor.dtype, std::move(e.tensor.shape),
                        base_ + header.data_start + e.begin, static_cast<std::size_t>(e.end - e.begin)});
  }
}

MappedSafetensors::~MappedSafetensors() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

const TensorView* MappedSafetensors::find(std::string_view name) const {
  for (const TensorView& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void write_safetensors(const fs::path& path, std::vector<TensorView> tensors,
                       const std::map<std::string, std::string>& metadata, const TensorFill& fill) {
  const std::string prefix = "cannot write safetensors file '" + path.string() + "': ";
  std::sort(tensors.begin(), tensors.end(), [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorView& t = tensors[i];
    if (t.name.empty() || t.name == "__metadata__") {
      throw UserError(prefix + "invalid tensor name '" + t.name + "'");
    }
    if (i > 0 && tensors[i - 1].name == t.name) {
      throw UserError(prefix + "tensor '" + t.name + "' is given twice");
    }
    bool valid_shape = true;
    for (int64_t d : t.shape) valid_shape = valid_shape && d >= 0;
    const uint64_t needed = valid_shape ? static_cast<uint64_t>(numel(t.shape)) * dtype_size(t.dtype) : 0;
    if (!valid_shape || needed != t.nbytes || (t.nbytes > 0 && t.data == nullptr && !fill)) {
      throw UserError(prefix + "tensor '" + t.name + "' has shape " + shape_text(t.shape) + " of " +
                      dtype_name(t.dtype) + " but " + std::to_string(t.nbytes) + " bytes of data");
    }
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }

  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const json::type_error& e) {  // a name or metadata string that is not UTF-8
    throw UserError(prefix + e.what());
  }
  // The format wants the data section 8-byte aligned: pad the header with spaces.
  header_text.append((kLengthBytes - header_text.size() % kLengthBytes) % kLengthBytes, ' ');
  unsigned char length_field[kLengthBytes];
  for (uint64_t i = 0; i < kLengthBytes; ++i) {
    length_field[i] = static_cast<unsigned char>(header_text.size() >> (8 * i));
  }

  AtomicFileWriter file(path);
  file.write(length_field, kLengthBytes);
  file.write(header_text);
  std::vector<char> block;
  for (const TensorView& t : tensors) {
    if (t.data || t.nbytes == 0) {
      file.write(t.data, t.nbytes);
      continue;
    }
    constexpr std::size_t kFillBlock = std::size_t(64) << 20;  // a multiple of every element size
    block.resize(std::min(kFillBlock, t.nbytes));
    for (std::size_t at = 0; at < t.nbytes; at += block.size()) {
      const std::size_t n = std::min(block.size(), t.nbytes - at);
      fill(t, at, n, block.data());
      file.write(block.data(), n);
    }
  }
  file.commit();
}

}  // namespace unstuck::io
