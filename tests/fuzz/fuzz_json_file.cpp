// libFuzzer target: the JSON file reader used for checkpoint manifests, trainer.json, run.json and
// HF config.json (read_json_file), and the one-value parser behind every JSONL reader. The
// checkpoint interpretation on top of it needs libtorch, which this build leaves out (tests/faults
// covers it with tampered files); config.json's has its own target (fuzz_hf_config).
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("unstuck_fuzz_" + std::to_string(::getpid()) + ".json");
  const std::string text(reinterpret_cast<const char*>(data), size);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << text;
  }
  try {
    (void)unstuck::io::read_json_file(file).dump();
  } catch (const unstuck::UserError&) {
  }
  try {
    (void)unstuck::io::parse_ordered_json(text, "fuzz:1").dump();
  } catch (const unstuck::UserError&) {
  } catch (const nlohmann::json::type_error&) {  // dump() of invalid UTF-8 inside a valid string
  }
  return 0;
}
