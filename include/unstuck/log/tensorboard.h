// TensorBoard scalar logging without TensorFlow: writes an events.out.tfevents.* file (TFRecord
// framing with masked CRC-32C, hand-encoded Event/Summary protobufs) that TensorBoard and its
// Python reader load. One file per run; flushed after every step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace unstuck {

class TensorBoardWriter {
 public:
  // Creates <dir>/events.out.tfevents.<unix time>.unstuck and writes the file-version record.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  // One event holding every (tag, value) pair at `step`.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::filesystem::path path_;
  std::ofstream out_;
};

// CRC-32C (Castagnoli), as TFRecord uses it; exposed for the tests.
uint32_t crc32c(const void* data, std::size_t size);

}  // namespace unstuck
