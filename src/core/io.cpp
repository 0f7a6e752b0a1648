// Checked, atomic writes and bounded reads of regular files (POSIX calls: every error is seen).
#include "normlab/io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "normlab/error.h"

namespace normlab {

namespace {

std::string reason() { return std::strerror(errno); }

// Writes all of text to fd; false (errno set) on a failed or short write.
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

std::string parent_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
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
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = reason();
    ::unlink(tmp.c_str());
    throw UsageError(fmt::format("cannot write '{}': {}", shown(path, 200), why));
  }
}

std::string read_file(const std::string& path, int64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below, as not regular).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  NL_USAGE(fd >= 0, "cannot read '{}': {}", shown(path, 200), reason());
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const bool dir = S_ISDIR(st.st_mode);
    ::close(fd);
    throw UsageError(fmt::format("cannot read '{}': {}", shown(path, 200),
                                 dir ? "it is a directory" : "not a regular file (a device, FIFO or socket)"));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    throw UsageError(fmt::format("cannot read '{}': {} bytes, more than the {} bytes allowed here", shown(path, 200),
                                 static_cast<long long>(st.st_size), static_cast<long long>(max_bytes)));
  }
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      const std::string why = reason();
      ::close(fd);
      throw UsageError(fmt::format("reading '{}' failed: {}", shown(path, 200), why));
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (static_cast<int64_t>(text.size()) > max_bytes) {  // the file grew while being read
      ::close(fd);
      throw UsageError(fmt::format("cannot read '{}': more than the {} bytes allowed here", shown(path, 200),
                                   static_cast<long long>(max_bytes)));
    }
  }
  ::close(fd);
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
