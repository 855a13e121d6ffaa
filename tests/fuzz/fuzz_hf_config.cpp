// libFuzzer target: Hugging Face config.json interpretation (model::parse_hf_config): family,
// sizes, rope settings, special tokens. Any input must end in a parsed config or a UserError
// naming the key, never a crash, a division by zero or an allocation sized by the input.
#include <cstddef>
#include <cstdint>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/io/json_file.h"
#include "unstuck/model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const unstuck::model::HfConfig c =
        unstuck::model::parse_hf_config(unstuck::io::parse_json(text, "config.json"), "config.json");
    (void)c.model.max_seq_len;
  } catch (const unstuck::UserError&) {
  }
  return 0;
}
