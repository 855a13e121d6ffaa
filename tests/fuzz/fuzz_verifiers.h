// Shared body of the verifier fuzz targets: the input is a completion (before a 0x01 byte) and the
// record's answer (after it); countdown also reads "numbers" and "target" from the answer part as
// JSON when it parses. score() must never throw for any completion, and the reward must be in [0, 1].
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "unstuck/common/error.h"
#include "unstuck/reward/verifier.h"

inline int fuzz_verifier(const char* task, const uint8_t* data, std::size_t size) {
  static const auto verifier = unstuck::reward::make_verifier(task, unstuck::reward::RewardConfig{});
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::size_t split = input.find('\x01');
  unstuck::data::TaskRecord record;
  record.task = task;
  record.prompt = "fuzz";
  record.answer = split == std::string::npos ? "42" : input.substr(split + 1);
  if (std::string(task) == "countdown") {
    record.fields["numbers"] = {3, 5, 7};
    record.fields["target"] = 22;
    const auto fields = nlohmann::json::parse(record.answer, nullptr, false);
    if (fields.is_object()) {
      if (fields.contains("numbers")) record.fields["numbers"] = fields["numbers"];
      if (fields.contains("target")) record.fields["target"] = fields["target"];
    }
  }
  double reward = 0;
  try {
    reward = verifier->score(input.substr(0, split), record).reward;
  } catch (const unstuck::UserError&) {
    return 0;  // a record without what the task needs (bad numbers/target) is a UserError
  }
  if (!(reward >= 0 && reward <= 1)) std::abort();
  return 0;
}
