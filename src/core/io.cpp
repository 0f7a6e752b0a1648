// Checked, atomic writes and bounded reads of regular files (POSIX calls: every error is seen).
#include "normlab/io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "normlab/error.h"
#include "normlab/system.h"

namespace normlab {

namespace {

std::string reason() { return std::strerror(errno); }


std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// text written whole to <path>.tmp.<pid>, which is returned; on a failed write it is removed and
// the UsageError names path and the system's reason.
std::string write_temporary(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  NL_USAGE(fd >= 0, "cannot write '{}': {}", shown(path, 200), reason());
  const bool ok = write_all(fd, text);
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!ok || !closed) {
    const std::string why = std::strerror(ok ? errno : write_errno);
    ::unlink(tmp.c_str());
    throw UsageError(fmt::format("writing '{}' failed: {}", shown(path, 200), why));
  }
  return tmp;
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = write_temporary(path, text);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = reason();
    ::unlink(tmp.c_str());
    throw UsageError(fmt::format("cannot write '{}': {}", shown(path, 200), why));
  }
}

ReadableFile::ReadableFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below, as not regular).
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  NL_USAGE(fd_ >= 0, "cannot read '{}': {}", shown(path, 200), reason());
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd_);
    fd_ = -1;
    throw UsageError(fmt::format("cannot read '{}': {}", shown(path, 200),
                                 dir ? "it is a directory" : "not a regular file (a device, FIFO or socket)"));
  }
  size_ = static_cast<int64_t>(st.st_size);
}

ReadableFile::~ReadableFile() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t ReadableFile::read_some(int64_t offset, void* buf, int64_t n) const {
  for (;;) {
    const ssize_t got = ::pread(fd_, buf, static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30)), offset);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    NL_USAGE(got >= 0, "reading '{}' failed: {}", shown(path_, 200), reason());
    return got;
  }
}

bool ReadableFile::read_at(int64_t offset, void* buf, int64_t n) const {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const int64_t got = read_some(offset, p, n);
    if (got == 0) return false;
    p += got;
    offset += got;
    n -= got;
  }
  return true;
}

std::string read_file(const std::string& path, int64_t max_bytes) {
  const ReadableFile file(path);
  NL_USAGE(file.size() <= max_bytes, "cannot read '{}': {} bytes, more than the {} bytes allowed here",
           shown(path, 200), static_cast<long long>(file.size()), static_cast<long long>(max_bytes));
  std::string text;
  text.reserve(static_cast<size_t>(file.size()));
  char buf[1 << 16];
  for (int64_t at = 0;;) {
    // Read to the end, not to the size fstat gave: a file that grows while being read is caught.
    const int64_t n = file.read_some(at, buf, sizeof(buf));
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    at += n;
    NL_USAGE(static_cast<int64_t>(text.size()) <= max_bytes, "cannot read '{}': more than the {} bytes allowed here",
             shown(path, 200), static_cast<long long>(max_bytes));
  }
  return text;
}

void check_output_file(const std::string& path, const std::string& flag) {
  NL_USAGE(!path.empty(), "{}: no file name given", flag);
  NL_USAGE(path.back() != '/', "{} '{}': a file name is needed, not a directory", flag, shown(path, 200));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    NL_USAGE(!S_ISDIR(st.st_mode), "{} '{}' is a directory; give a file name", flag, shown(path, 200));
    NL_USAGE(S_ISREG(st.st_mode), "{} '{}' is not a regular file", flag, shown(path, 200));
  }
  const std::string dir = parent_of(path);
  struct stat dst {};
  NL_USAGE(::stat(dir.c_str(), &dst) == 0 && S_ISDIR(dst.st_mode), "{} '{}': the directory '{}' does not exist", flag,
           shown(path, 200), shown(dir, 200));
  NL_USAGE(::access(dir.c_str(), W_OK) == 0, "{} '{}': the directory '{}' is not writable", flag, shown(path, 200),
           shown(dir, 200));
}

void check_output_dir(const std::string& path, const std::string& flag) {
  NL_USAGE(!path.empty(), "{} needs a directory", flag);
  // The directory itself when it exists, else the nearest ancestor that does (where the missing
  // levels will be created): a directory this process can write into.
  std::filesystem::path p = std::filesystem::absolute(path).lexically_normal();
  struct stat st {};
  while (::stat(p.c_str(), &st) != 0 && errno == ENOENT && p.has_parent_path() && p.parent_path() != p) p = p.parent_path();
  NL_USAGE(::stat(p.c_str(), &st) == 0, "{} '{}': '{}' cannot be reached: {}", flag, shown(path, 200), shown(p.string(), 200),
           std::strerror(errno));
  NL_USAGE(S_ISDIR(st.st_mode), "{} '{}': '{}' is not a directory", flag, shown(path, 200), shown(p.string(), 200));
  NL_USAGE(::access(p.c_str(), W_OK | X_OK) == 0, "{} '{}': the directory '{}' is not writable", flag, shown(path, 200),
           shown(p.string(), 200));
}

namespace {

// What is at an output path now: nothing (ENOENT), or a file normlab may or may not replace.
// Empty: the path may be written; otherwise the refusal.
std::string output_refusal(const std::string& path, const std::string& flag, bool force, const WrittenByNormlab& ours) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return "";
  const std::string p = shown(path, 200);
  if (S_ISLNK(st.st_mode)) return fmt::format("{} '{}' is a symbolic link; normlab neither follows nor replaces it", flag, p);
  if (S_ISDIR(st.st_mode)) return fmt::format("{} '{}' is a directory; give a file name", flag, p);
  if (!S_ISREG(st.st_mode)) return fmt::format("{} '{}' is not a regular file", flag, p);
  if (!force) return fmt::format("{} '{}' exists (use --force to replace it)", flag, p);
  bool recognized = false;
  try {
    recognized = ours && ours(read_file(path, kMaxReadBytes));
  } catch (const std::exception&) {
    recognized = false;  // unreadable, too large: not something normlab can tell is its own
  }
  if (!recognized)
    return fmt::format("{} '{}' exists and is not a file normlab wrote; normlab never replaces it, even with --force: "
                       "choose another name",
                       flag, p);
  return "";
}

}  // namespace

void check_output_file(const std::string& path, const std::string& flag, bool force, const WrittenByNormlab& ours) {
  check_output_file(path, flag);
  const std::string refusal = output_refusal(path, flag, force, ours);
  NL_USAGE(refusal.empty(), "{}", refusal);
}

void write_output_file(const std::string& path, const std::string& text, const std::string& flag, bool force,
                       const WrittenByNormlab& ours) {
  const std::string tmp = write_temporary(path, text);
  auto fail = [&](const std::string& why) {
    ::unlink(tmp.c_str());
    throw UsageError(why);
  };
  // Checked again now: the file may have appeared, or been replaced, while the command worked.
  const std::string refusal = output_refusal(path, flag, force, ours);
  if (!refusal.empty()) fail(refusal + " (it changed while this command was running)");
  struct stat st {};
  const bool replacing = ::lstat(path.c_str(), &st) == 0;
  int rc = 0;
  if (replacing) {
    rc = std::rename(tmp.c_str(), path.c_str());
  } else {
    rc = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {  // no RENAME_NOREPLACE here: link() never replaces
      rc = ::link(tmp.c_str(), path.c_str());
      if (rc == 0) ::unlink(tmp.c_str());
    }
  }
  if (rc != 0) {
    const int e = errno;
    fail(e == EEXIST ? fmt::format("{} '{}' appeared while this command was running; it was left as it is", flag,
                                   shown(path, 200))
                     : fmt::format("cannot write '{}': {}", shown(path, 200), std::strerror(e)));
  }
}

bool write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

bool rename_noreplace(const std::string& from, const std::string& to) {
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS) return false;
  // A file system without RENAME_NOREPLACE: claim the name with mkdir (atomic), then replace
  // the empty directory we own.
  if (::mkdir(to.c_str(), 0755) != 0) return false;
  if (::rename(from.c_str(), to.c_str()) == 0) return true;
  const int e = errno;
  ::rmdir(to.c_str());
  errno = e;
  return false;
}

namespace {
constexpr const char* kPartialTag = ".partial.";

std::string without_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The digits of a pid: 1 to 9 of them (a pid_t is below 2^22 on Linux).
bool pid_digits(const std::string& digits, long* pid) {
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *pid = std::stol(digits);
  return true;
}
}  // namespace

std::string partial_path(const std::string& path) {
  return without_trailing_slashes(path) + kPartialTag + std::to_string(::getpid());
}

bool split_partial(const std::string& partial_in, std::string* path, long* pid) {
  const std::string partial = without_trailing_slashes(partial_in);
  const std::string tag = kPartialTag;
  const size_t at = partial.rfind(tag);
  if (at == std::string::npos || at == 0 || partial[at - 1] == '/') return false;
  if (partial.find('/', at) != std::string::npos || !pid_digits(partial.substr(at + tag.size()), pid)) return false;
  *path = partial.substr(0, at);
  return true;
}

std::vector<std::pair<std::string, long>> partials_of(const std::string& path_in) {
  const std::string path = without_trailing_slashes(path_in);
  const size_t slash = path.find_last_of('/');
  const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string prefix = (slash == std::string::npos ? path : path.substr(slash + 1)) + kPartialTag;
  std::vector<std::pair<std::string, long>> found;
  DIR* d = ::opendir(parent.c_str());
  if (!d) return found;
  while (const struct dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    long pid = 0;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
        !pid_digits(name.substr(prefix.size()), &pid))
      continue;
    found.emplace_back(slash == std::string::npos ? name : parent == "/" ? "/" + name : parent + "/" + name, pid);
  }
  ::closedir(d);
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<std::string> stale_partials(const std::string& path) {
  std::vector<std::string> stale;
  for (const auto& [p, pid] : partials_of(path))
    if (!process_alive(pid)) stale.push_back(p);
  return stale;
}

CheckedFile::CheckedFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  NL_USAGE(fd_ >= 0, "cannot write '{}': {}", shown(path, 200), reason());
}

CheckedFile::~CheckedFile() {
  if (fd_ >= 0) ::close(fd_);
}

void CheckedFile::write(const std::string& text) {
  NL_USAGE(fd_ >= 0 && write_all(fd_, text), "writing '{}' failed: {}", shown(path_, 200),
           fd_ >= 0 ? reason() : "closed");
}

void CheckedFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  NL_USAGE(::close(fd) == 0, "writing '{}' failed: {}", shown(path_, 200), reason());
}

void write_files_atomic(const std::vector<std::pair<std::string, std::string>>& files) {
  // Every file whole under a staging name first; only then the renames, which do not fail for want
  // of space or a file-size limit.
  std::vector<std::string> staged;
  auto unstage = [&] {
    for (const std::string& p : staged) ::unlink(p.c_str());
  };
  try {
    for (const auto& [path, text] : files) {
      const std::string tmp = path + ".tmp-set." + std::to_string(getpid());
      write_file_atomic(tmp, text);
      staged.push_back(tmp);
    }
  } catch (const UsageError& e) {
    unstage();
    // name the file, not its staging name
    std::string what = e.what();
    const std::string tag = ".tmp-set." + std::to_string(getpid());
    for (size_t at; (at = what.find(tag)) != std::string::npos;) what.erase(at, tag.size());
    throw UsageError(what);
  }
  for (size_t i = 0; i < files.size(); ++i) {
    if (std::rename(staged[i].c_str(), files[i].first.c_str()) != 0) {
      const std::string why = reason();
      staged.erase(staged.begin(), staged.begin() + static_cast<long>(i));
      unstage();
      throw UsageError(fmt::format("cannot write '{}': {}", shown(files[i].first, 200), why));
    }
  }
}

}  // namespace normlab
