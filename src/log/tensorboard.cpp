// TFRecord + protobuf encoding of TensorBoard scalar events (see tensorboard.h).
#include "unstuck/log/tensorboard.h"

#include <array>
#include <chrono>
#include <cstring>

#include "unstuck/common/error.h"

namespace unstuck {
namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
    t[i] = c;
  }
  return t;
}

uint32_t masked_crc(const void* data, std::size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protobuf wire format pieces.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}
template <class T>
void put_fixed(std::string& out, T v) {  // little-endian fixed32 / fixed64
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}
void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_varint(out, (uint64_t(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

std::string event_header(int64_t step) {
  std::string e;
  const double wall = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  put_varint(e, (1 << 3) | 1);  // wall_time: double
  put_fixed(e, wall);
  put_varint(e, (2 << 3) | 0);  // step: int64
  put_varint(e, uint64_t(step));
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, std::size_t size) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  const auto now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = dir / ("events.out.tfevents." + std::to_string(now) + ".unstuck");
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw UserError("cannot write TensorBoard events to '" + path_.string() + "'");
  std::string e = event_header(0);
  put_bytes(e, 3, "brain.Event:2");  // file_version
  write_record(e);
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);         // Summary.Value.tag
    put_varint(v, (2 << 3) | 5);  // Summary.Value.simple_value: float
    put_fixed(v, float(value));
    put_bytes(summary, 1, v);  // Summary.value (repeated)
  }
  std::string e = event_header(step);
  put_bytes(e, 5, summary);  // Event.summary
  write_record(e);
}

void TensorBoardWriter::write_record(const std::string& event) {
  std::string rec;
  const uint64_t len = event.size();
  put_fixed(rec, len);
  put_fixed(rec, masked_crc(&len, sizeof len));
  rec += event;
  put_fixed(rec, masked_crc(event.data(), event.size()));
  out_.write(rec.data(), std::streamsize(rec.size()));
  out_.flush();
}

}  // namespace unstuck
