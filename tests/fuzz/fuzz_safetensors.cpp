// libFuzzer target: a whole safetensors file (length field, JSON header, tensor bytes) through the
// public reader. read_safetensors() takes a path, so each input is written to a scratch file first.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("unstuck_fuzz_" + std::to_string(::getpid()) + ".safetensors");
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    const unstuck::io::SafetensorsFile st = unstuck::io::read_safetensors(file);
    for (const auto& t : st.tensors) (void)unstuck::io::numel(t.shape);
  } catch (const unstuck::UserError&) {
  }
  return 0;
}
