// libFuzzer target: one JSONL line through the record reader (depth cap, JSON errors, field
// mapping). Any input must give a record or a UserError, never a crash or another exception.
#include <cstddef>
#include <cstdint>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/data/record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  try {
    const unstuck::data::TaskRecord record = unstuck::data::parse_record_line(line, "fuzz:1");
    (void)unstuck::data::record_to_json(record).dump();
  } catch (const unstuck::UserError&) {
  }
  return 0;
}
