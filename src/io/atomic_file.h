// Crash-safe file writes: data goes to a temporary file in the target's directory, which
// commit() flushes to disk and renames over the target. Readers see the old file or the complete
// new one, never a half-written one; a writer destroyed without commit() leaves the target alone.
#pragma once

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

namespace unstuck::io {

class AtomicFileWriter {
 public:
  // Opens "<dir>/.<name>.tmp-<pid>" next to `path`. Throws UserError naming `path` when the
  // directory does not exist or is not writable.
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();  // removes the temporary file unless committed
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Flushes, fsyncs and renames the temporary file to `path`. Errors name `path`.
  void commit();

  const std::filesystem::path& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& why) const;

  std::filesystem::path path_;
  std::filesystem::path temp_path_;
  std::FILE* file_ = nullptr;
};

}  // namespace unstuck::io
