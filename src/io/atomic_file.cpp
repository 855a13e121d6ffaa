// AtomicFileWriter: temporary file + fsync + rename(2), which POSIX makes atomic within one
// file system (hence the temporary file lives in the target's directory).
#include "io/atomic_file.h"

#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "unstuck/common/error.h"

namespace unstuck::io {

AtomicFileWriter::AtomicFileWriter(std::filesystem::path path) : path_(std::move(path)) {
  temp_path_ = path_.parent_path() / ("." + path_.filename().string() + ".tmp-" + std::to_string(::getpid()));
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (file_ == nullptr) {
    fail("cannot create a temporary file next to it (" + std::string(std::strerror(errno)) + ")");
  }
}

AtomicFileWriter::~AtomicFileWriter() {
  if (file_ != nullptr) {
    std::fclose(file_);
    std::error_code ec;
    std::filesystem::remove(temp_path_, ec);
  }
}

void AtomicFileWriter::write(const void* data, std::size_t size) {
  assert(file_ != nullptr && "write() after commit()");
  if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
    fail("write failed (" + std::string(std::strerror(errno)) + ")");
  }
}

void AtomicFileWriter::commit() {
  assert(file_ != nullptr && "commit() called twice");
  const bool flushed = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const std::string flush_error = flushed ? "" : std::strerror(errno);
  const bool closed = std::fclose(file_) == 0;
  const std::string close_error = closed ? "" : std::strerror(errno);
  file_ = nullptr;
  std::error_code ec;
  if (!flushed || !closed) {
    std::filesystem::remove(temp_path_, ec);
    fail("write failed (" + (flushed ? close_error : flush_error) + ")");
  }
  std::filesystem::rename(temp_path_, path_, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(temp_path_, ec);
    fail("rename failed (" + why + ")");
  }
}

void AtomicFileWriter::fail(const std::string& why) const {
  throw UserError("cannot write '" + path_.string() + "': " + why);
}

}  // namespace unstuck::io
