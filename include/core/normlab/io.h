// Files normlab reads and writes. Writes are never half-written (a temporary name in the same
// directory, then rename) and every write is checked: a full disk or a file-size limit is an error
// naming the file, never a silently truncated file. Reads take regular files only, up to a size.
#pragma once
#include <cstdint>
#include <functional>
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

// A regular file opened for reading, without ever blocking: a FIFO, a device (/dev/zero), a socket
// or a directory is refused at open (O_NONBLOCK, then fstat), so no reader of normlab waits on a
// writer that never comes. Errors are UsageErrors "cannot read '<path>': <reason>", the reason
// the system's ("No such file or directory", "Permission denied") or "it is a directory" /
// "not a regular file (a device, FIFO or socket)".
class ReadableFile {
 public:
  explicit ReadableFile(const std::string& path);
  ~ReadableFile();
  ReadableFile(const ReadableFile&) = delete;
  ReadableFile& operator=(const ReadableFile&) = delete;
  int64_t size() const { return size_; }
  // Exactly n bytes at offset; false when the file ends first (it shrank); UsageError on an error.
  bool read_at(int64_t offset, void* buf, int64_t n) const;
  // Up to n bytes at offset: how many were read, 0 at the end; UsageError on an error.
  int64_t read_some(int64_t offset, void* buf, int64_t n) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// Checked before any work is done: `path` can be created or replaced as a file (its directory
// exists and is writable; it is not a directory). `flag` names the option in the error.
void check_output_file(const std::string& path, const std::string& flag);

// Checked before any work is done: `path` is a directory this process can write into, or can be
// created (its nearest existing ancestor is a writable directory). `flag` names the option.
void check_output_dir(const std::string& path, const std::string& flag);

// Does the text of an existing file say normlab wrote it (a bench document, a gradcheck dump)?
// Never throws.
using WrittenByNormlab = std::function<bool(const std::string& text)>;
// An output file a command writes whole (bench --out, gradcheck --dump), checked before any work
// (check_output_file's checks, then): an existing file is refused unless `force`, and even with
// `force` only a regular file that `ours` recognizes may be replaced: a person's file never is.
void check_output_file(const std::string& path, const std::string& flag, bool force, const WrittenByNormlab& ours);
// Writes it at the end of the work: a temporary name in the same directory, then a rename that
// never replaces a file that appeared since the check (without `force`), nor one that is not
// normlab's (with it). Throws UsageError naming the file; the temporary file is removed.
void write_output_file(const std::string& path, const std::string& text, const std::string& flag, bool force,
                       const WrittenByNormlab& ours);

// All of text to an open descriptor, retrying short writes and EINTR; false (errno set) when a
// write fails. For files that other code opens itself (an events file, created O_EXCL).
bool write_all(int fd, const std::string& text);

// rename(from, to) of a directory that fails (errno EEXIST or ENOTEMPTY) when `to` exists instead of
// replacing it: how a directory written under a temporary name takes its name.
bool rename_noreplace(const std::string& from, const std::string& to);

// ---- the temporary name: <path>.partial.<pid> -----------------------------------------------
// Where a command writes what becomes `path` (a run directory, a conversion, a report site, an
// exported events file) until it is whole: <path>.partial.<pid of this process>. A process that
// dies without cleaning up (SIGKILL) leaves one behind; the next command into `path` names it
// (stale_partials), and no command takes such a name for a finished result (split_partial).
std::string partial_path(const std::string& path);
// "<path>.partial.<pid>" -> path and pid; false for any other name (the pid is 1 to 9 digits, and
// the tag is in the last component).
bool split_partial(const std::string& partial, std::string* path, long* pid);
// The <path>.partial.<pid> entries beside path (in its parent directory), any pid, with their pids.
std::vector<std::pair<std::string, long>> partials_of(const std::string& path);
// Those of them whose process is gone (process_alive): left by a process that died.
std::vector<std::string> stale_partials(const std::string& path);

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
