// Safetensors tests: round trips of F32/BF16/F16 with metadata, the exact error every malformed
// file gets, atomic writes, and interoperability with Python's `safetensors` package both ways
// (skipped with a reason when UNSTUCK_PYTHON lacks torch or safetensors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "unstuck/common/error.h"
#include "unstuck/io/safetensors.h"
#include "unstuck/io/safetensors_dir.h"

namespace fs = std::filesystem;
using unstuck::UserError;
using unstuck::io::DType;
using unstuck::io::MappedSafetensors;
using unstuck::io::parse_byte_size;
using unstuck::io::read_safetensors;
using unstuck::io::Tensor;
using unstuck::io::TensorView;
using unstuck::io::write_safetensors;

namespace {

template <class T>
std::vector<uint8_t> to_bytes(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <class T>
std::vector<T> from_bytes(const std::vector<uint8_t>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// BF16 bits of floats that BF16 represents exactly (the upper half of the FP32 bits).
std::vector<uint16_t> bf16_bits(const std::vector<float>& values) {
  std::vector<uint16_t> bits;
  for (float v : values) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    bits.push_back(static_cast<uint16_t>(u >> 16));
  }
  return bits;
}

// Values exactly representable in each format, shared with the Python scripts below.
const std::vector<float> kF32 = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};  // shape (2, 3)
const std::vector<float> kBF16 = {1.0f, -2.5f, 0.15625f, 65536.0f};      // shape (4,)
// 0.5, -3.0, 1024.0, 6.103515625e-05 (smallest normal FP16) as FP16 bits; shape (2, 2)
const std::vector<uint16_t> kF16Bits = {0x3800, 0xC200, 0x6400, 0x0400};

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("unstuck_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The three tensors above, as owning Tensors.
  static std::vector<Tensor> sample_tensors() {
    return {Tensor{"w32", DType::f32, {2, 3}, to_bytes(kF32)},
            Tensor{"wbf", DType::bf16, {4}, to_bytes(bf16_bits(kBF16))},
            Tensor{"w16", DType::f16, {2, 2}, to_bytes(kF16Bits)}};
  }

  // A file made of a length field, `header` verbatim and `data_size` zero bytes.
  std::string raw_file(const std::string& name, const std::string& header, size_t data_size,
                       uint64_t declared_length = UINT64_MAX) const {
    const std::string p = path(name);
    std::ofstream out(p, std::ios::binary);
    const uint64_t length = declared_length == UINT64_MAX ? header.size() : declared_length;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length >> (8 * i)));
    out << header << std::string(data_size, '\0');
    return p;
  }

  std::string read_error(const std::string& file) const {
    try {
      read_safetensors(file);
    } catch (const UserError& e) {
      return e.what();
    }
    return "<no UserError>";
  }

  // Runs `script` with UNSTUCK_PYTHON and the test directory as argv[1]; returns the exit code.
  int run_python(const std::string& script) const {
    const std::string file = path("script.py");
    std::ofstream(file) << script;
    const std::string command = std::string(UNSTUCK_PYTHON) + " " + file + " " + dir_.string();
    return std::system(command.c_str());
  }

  bool python_has_safetensors() const {
    const std::string command = std::string(UNSTUCK_PYTHON) + " -c 'import safetensors.torch, torch' >/dev/null 2>&1";
    return std::system(command.c_str()) == 0;
  }

  fs::path dir_;
};

void expect_error(const std::string& error, const std::string& expected) {
  EXPECT_NE(error.find(expected), std::string::npos) << "got:      " << error << "\nexpected: " << expected;
}

}  // namespace

TEST_F(SafetensorsTest, RoundTripsAllDtypesAndMetadata) {
  const std::vector<Tensor> tensors = sample_tensors();
  std::vector<TensorView> views;
  for (const Tensor& t : tensors) views.push_back(unstuck::io::view_of(t));
  write_safetensors(path("m.safetensors"), views, {{"format", "pt"}, {"step", "12"}});

  const auto file = read_safetensors(path("m.safetensors"));
  ASSERT_EQ(file.tensors.size(), 3u);
  // Data is laid out by name.
  EXPECT_EQ(file.tensors[0].name, "w16");
  EXPECT_EQ(file.tensors[1].name, "w32");
  EXPECT_EQ(file.tensors[2].name, "wbf");
  for (const Tensor& expected : tensors) {
    const Tensor& got = file.at(expected.name);
    EXPECT_EQ(got.dtype, expected.dtype) << expected.name;
    EXPECT_EQ(got.shape, expected.shape) << expected.name;
    EXPECT_EQ(got.bytes, expected.bytes) << expected.name;
  }
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("step"), "12");
  EXPECT_EQ(file.find("nope"), nullptr);
  expect_error(
      [&] {
        try {
          file.at("nope");
        } catch (const UserError& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      "has no tensor 'nope'");
}

// Tensors without data are filled block by block: the file equals the one written from whole
// buffers, for a tensor of 80 MiB (a block of 64 MiB and the rest), beside small ones, and in
// a sharded directory. Without a fill, a tensor without data is refused.
TEST_F(SafetensorsTest, FilledTensorsAreWrittenAsTheWholeBuffersWould) {
  std::vector<float> big(std::size_t(20) << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = float(i % 65521) * 0.5f;
  const std::vector<Tensor> small = sample_tensors();
  std::vector<TensorView> whole{TensorView{"big", DType::f32, {int64_t(big.size())}, big.data(), big.size() * 4}};
  for (const Tensor& t : small) whole.push_back(unstuck::io::view_of(t));
  std::vector<TensorView> empty = whole;
  for (TensorView& v : empty) v.data = nullptr;
  std::vector<std::size_t> asked;  // the block sizes `fill` was asked for
  const unstuck::io::TensorFill fill = [&](const TensorView& t, std::size_t at, std::size_t n, void* out) {
    for (const TensorView& w : whole)
      if (w.name == t.name) std::memcpy(out, static_cast<const char*>(w.data) + at, n);
    if (t.name == "big") asked.push_back(n);
  };
  write_safetensors(path("whole.safetensors"), whole, {{"format", "pt"}});
  write_safetensors(path("filled.safetensors"), empty, {{"format", "pt"}}, fill);
  const auto bytes = [&](const std::string& f) {
    std::ifstream in(path(f), std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_TRUE(bytes("whole.safetensors") == bytes("filled.safetensors"));
  EXPECT_EQ(asked, (std::vector<std::size_t>{std::size_t(64) << 20, std::size_t(16) << 20}));
  unstuck::io::write_safetensors_dir(path("whole_dir"), whole, 1 << 20);
  unstuck::io::write_safetensors_dir(path("filled_dir"), empty, 1 << 20, {}, fill);
  for (const auto& e : fs::directory_iterator(path("whole_dir"))) {
    const std::string name = e.path().filename().string();
    EXPECT_TRUE(bytes("whole_dir/" + name) == bytes("filled_dir/" + name)) << name;
  }
  expect_error(
      [&] {
        try {
          write_safetensors(path("nothing.safetensors"), empty);
        } catch (const UserError& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      "tensor 'big' has shape");
}

TEST_F(SafetensorsTest, HeaderIsPaddedToEightBytesAndEmptyTensorsWork) {
  const float scalar = 3.0f;
  write_safetensors(path("s.safetensors"), {TensorView{"scalar", DType::f32, {}, &scalar, 4},
                                            TensorView{"empty", DType::bf16, {0, 5}, nullptr, 0}});
  std::ifstream in(path("s.safetensors"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ(header_size % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ(bytes.size(), 8 + header_size + 4);

  const auto file = read_safetensors(path("s.safetensors"));
  EXPECT_TRUE(file.metadata.empty());
  EXPECT_EQ(from_bytes<float>(file.at("scalar").bytes), std::vector<float>{3.0f});
  EXPECT_TRUE(file.at("scalar").shape.empty());
  EXPECT_EQ(file.at("empty").shape, (std::vector<int64_t>{0, 5}));
  EXPECT_TRUE(file.at("empty").bytes.empty());
}

TEST_F(SafetensorsTest, WriterRejectsBadTensorsAndKeepsTheOldFile) {
  const std::string file = path("keep.safetensors");
  const float one = 1.0f;
  write_safetensors(file, {TensorView{"a", DType::f32, {1}, &one, 4}});
  std::string error;
  try {
    write_safetensors(file, {TensorView{"a", DType::f32, {2}, &one, 4}});
  } catch (const UserError& e) {
    error = e.what();
  }
  expect_error(error,
               "cannot write safetensors file '" + file + "': tensor 'a' has shape [2] of F32 but 4 bytes of data");
  EXPECT_THROW(
      write_safetensors(file, {TensorView{"a", DType::f32, {1}, &one, 4}, TensorView{"a", DType::f32, {1}, &one, 4}}),
      UserError);
  EXPECT_THROW(write_safetensors(path("no_dir/x.safetensors"), {}), UserError);
  EXPECT_EQ(read_safetensors(file).at("a").bytes, to_bytes(std::vector<float>{1.0f}));
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << entry.path();
  }
}

TEST_F(SafetensorsTest, ErrorsNameTheFileAndTensor) {
  const std::string missing = path("missing.safetensors");
  expect_error(read_error(missing), "safetensors file '" + missing + "' not found");

  const std::string tiny = path("tiny.safetensors");
  std::ofstream(tiny) << "abc";
  expect_error(read_error(tiny),
               "safetensors file '" + tiny + "' is truncated: 3 bytes, shorter than the 8-byte header");

  const std::string huge = raw_file("huge.safetensors", "{}", 0, 200'000'000);
  expect_error(read_error(huge),
               "safetensors file '" + huge + "' declares a 200000000-byte JSON header, over the limit");

  const std::string short_header = raw_file("short.safetensors", "{}", 0, 64);
  expect_error(read_error(short_header),
               "safetensors file '" + short_header +
                   "' is truncated: it declares a 64-byte JSON header but only 2 bytes follow");

  const std::string bad_json = raw_file("json.safetensors", "{\"a\": [", 0);
  expect_error(read_error(bad_json), "safetensors file '" + bad_json + "' has a malformed JSON header: parse error");

  const std::string p = path("t.safetensors");
  const auto header_error = [&](const std::string& header, size_t data) {
    return read_error(raw_file("t.safetensors", header, data));
  };
  const std::string prefix = "safetensors file '" + p + "': ";
  expect_error(header_error(R"({"x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}})", 8),
               prefix +
                   "tensor 'x' has dtype I64, which unstuck does not load "
                   "(supported: F32, BF16, F16)");
  expect_error(header_error(R"({"x": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", 8),
               prefix + "tensor 'x' has dtype F64, which unstuck does not load");
  expect_error(header_error(R"({"x": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", 1),
               prefix + "tensor 'x' has dtype U8, which unstuck does not load");
  expect_error(header_error(R"({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}})", 1),
               prefix + "tensor 'x' has unknown dtype 'Q7'");
  expect_error(header_error(R"({"x": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 20),
               prefix +
                   "tensor 'x' has shape [2, 3] of F32, which needs 24 bytes, but "
                   "data_offsets [0, 20] cover 20");
  expect_error(header_error(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8),
               prefix +
                   "tensor 'x' has data_offsets [0, 16] beyond the 8 bytes of data after "
                   "the header: the file is truncated");
  expect_error(header_error(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                            12),
               prefix + "tensor 'y' has data_offsets [4, 12] overlapping those of 'x' [0, 8]");
  expect_error(header_error(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                "y": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
                            12),
               prefix + "tensor 'y' has data_offsets [8, 12] leaving a gap after byte 4");
  expect_error(header_error(R"({"x": {"dtype": "F32", "shape": [0], "data_offsets": [4, 0]}})", 4),
               prefix + "tensor 'x' has data_offsets [4, 0] that end before they begin");
  expect_error(header_error(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 6),
               prefix + "2 bytes follow the last tensor's data");
  expect_error(header_error(R"({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4),
               prefix + "tensor 'x' has shape [-1]; expected non-negative integers");
  expect_error(header_error(R"({"x": {"dtype": "F32", "shape": [1]}})", 4),
               prefix + "tensor 'x' has no \"data_offsets\"");
  expect_error(header_error(R"({"__metadata__": {"step": 3}})", 0),
               prefix + "\"__metadata__\" entry 'step' is not a string");
  expect_error(header_error("[1, 2]", 0), prefix + "the JSON header is not an object");
}

TEST_F(SafetensorsTest, ReadsWhatPythonWrites) {
  if (!python_has_safetensors()) {
    GTEST_SKIP() << UNSTUCK_PYTHON << " cannot import torch and safetensors";
  }
  const std::string script = R"(
import sys, torch
from safetensors.torch import save_file
save_file({
    "w32": torch.tensor([[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]], dtype=torch.float32),
    "wbf": torch.tensor([1.0, -2.5, 0.15625, 65536.0], dtype=torch.bfloat16),
    "w16": torch.tensor([[0.5, -3.0], [1024.0, 6.103515625e-05]], dtype=torch.float16),
}, sys.argv[1] + "/py.safetensors", metadata={"format": "pt", "source": "python"})
)";
  ASSERT_EQ(run_python(script), 0);
  const auto file = read_safetensors(path("py.safetensors"));
  for (const Tensor& expected : sample_tensors()) {
    const Tensor& got = file.at(expected.name);
    EXPECT_EQ(got.dtype, expected.dtype) << expected.name;
    EXPECT_EQ(got.shape, expected.shape) << expected.name;
    EXPECT_EQ(got.bytes, expected.bytes) << expected.name;
  }
  EXPECT_EQ(file.metadata.at("source"), "python");
}

TEST_F(SafetensorsTest, PythonReadsWhatWeWrite) {
  if (!python_has_safetensors()) {
    GTEST_SKIP() << UNSTUCK_PYTHON << " cannot import torch and safetensors";
  }
  const std::vector<Tensor> tensors = sample_tensors();
  std::vector<TensorView> views;
  for (const Tensor& t : tensors) views.push_back(unstuck::io::view_of(t));
  write_safetensors(path("cpp.safetensors"), views, {{"source", "unstuck"}});
  const std::string script = R"(
import sys, torch
from safetensors import safe_open
from safetensors.torch import load_file
path = sys.argv[1] + "/cpp.safetensors"
t = load_file(path)
assert set(t) == {"w32", "wbf", "w16"}, set(t)
assert t["w32"].dtype == torch.float32 and t["wbf"].dtype == torch.bfloat16
assert t["w16"].dtype == torch.float16
assert torch.equal(t["w32"], torch.tensor([[-1.0, -0.5, 0.0], [0.5, 1.0, 1.5]]))
assert torch.equal(t["wbf"], torch.tensor([1.0, -2.5, 0.15625, 65536.0], dtype=torch.bfloat16))
assert torch.equal(t["w16"], torch.tensor([[0.5, -3.0], [1024.0, 6.103515625e-05]],
                                          dtype=torch.float16))
with safe_open(path, framework="pt") as f:
    assert f.metadata() == {"source": "unstuck"}, f.metadata()
)";
  EXPECT_EQ(run_python(script), 0);
}

// The memory-mapped reader sees the same tensors as the copying one, and validates the same way.
TEST_F(SafetensorsTest, MappedReaderMatchesTheCopyingReader) {
  const std::vector<Tensor> tensors = sample_tensors();
  std::vector<TensorView> views;
  for (const Tensor& t : tensors) views.push_back(view_of(t));
  write_safetensors(path("m.safetensors"), views, {{"format", "pt"}});
  const unstuck::io::SafetensorsFile copied = read_safetensors(path("m.safetensors"));
  const MappedSafetensors mapped(path("m.safetensors"));
  ASSERT_EQ(mapped.tensors().size(), copied.tensors.size());
  EXPECT_EQ(mapped.metadata(), copied.metadata);
  for (const Tensor& t : copied.tensors) {
    const TensorView* m = mapped.find(t.name);
    ASSERT_NE(m, nullptr) << t.name;
    EXPECT_EQ(m->shape, t.shape);
    EXPECT_EQ(m->dtype, t.dtype);
    ASSERT_EQ(m->nbytes, t.bytes.size());
    EXPECT_EQ(std::memcmp(m->data, t.bytes.data(), m->nbytes), 0) << t.name;
  }
  const std::string truncated =
      raw_file("t.safetensors", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
  try {
    MappedSafetensors bad(truncated);
    ADD_FAILURE();
  } catch (const UserError& e) {
    expect_error(e.what(), "the file is truncated");
  }
}

TEST(ByteSize, ParsesTransformersStyleSizes) {
  EXPECT_EQ(parse_byte_size("2GB", "--shard-size"), 2'000'000'000u);
  EXPECT_EQ(parse_byte_size("500MB", "--shard-size"), 500'000'000u);
  EXPECT_EQ(parse_byte_size("1GiB", "--shard-size"), 1073741824u);
  EXPECT_EQ(parse_byte_size("20KB", "--shard-size"), 20'000u);
  EXPECT_EQ(parse_byte_size("4096", "--shard-size"), 4096u);
  try {
    parse_byte_size("big", "--shard-size");
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--shard-size"), std::string::npos);
  }
}
