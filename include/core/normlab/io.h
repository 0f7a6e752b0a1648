// Files normlab reads and writes. Writes are never half-written (a temporary name in the same
// directory, then rename) and every write is checked: a full disk or a file-size limit is an error
// naming the file, never a silently truncated file. Reads take regular files only, up to a size.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

// Writes `text` to <path>.tmp.<pid> and renames it to path; throws UsageError naming the path
// (and the system's reason: "No space left on device", "File too large", ...).
void write_file_atomic(const std::string& path, const std::string& text);

// The most read_file reads by default (a text corpus for `--data text:PATH`).
constexpr int64_t kMaxReadBytes = int64_t{1} << 30;
// The whole file; throws UsageError naming the path when it cannot be read, is not a regular file
// (a directory, a FIFO, /dev/zero) or is larger than max_bytes.
std::string read_file(const std::string& path, int64_t max_bytes = kMaxReadBytes);

// Checked before any work is done: `path` can be created or replaced as a file (its directory
// exists and is writable; it is not a directory). `flag` names the option in the error.
void check_output_file(const std::string& path, const std::string& flag);

// A file written line by line (metrics.jsonl): created (truncated) on open; each write is checked
// and a failed or short write throws UsageError naming the file and the reason.
class CheckedFile {
 public:
  explicit CheckedFile(const std::string& path);
  ~CheckedFile();
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;
  void write(const std::string& text);
  void close();  // checked; the destructor closes silently

 private:
  std::string path_;
  int fd_ = -1;
};

// Several files, all or none: each written whole under a temporary name, then all renamed. A
// failed write (the disk, a file-size limit, a read-only directory) leaves every path as it was and
// throws UsageError naming the file.
void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace normlab
