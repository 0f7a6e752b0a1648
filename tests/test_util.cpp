// The tests' helpers. Programs run by fork + execve with stdout and stderr on two pipes, drained
// together with poll() so a child that fills one pipe while we wait on the other cannot
// deadlock; a deadline kills a hung child.
#include "test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <gtest/gtest.h>

#include "normlab/tensor.h"

extern char** environ;

namespace normlab::test {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::filesystem::path fresh_dir(const std::string& name) {
  // The pid keeps tests that run at once (ctest -j, another checkout's tests) out of each other's way.
  std::filesystem::path p =
      std::filesystem::path(testing::TempDir()) / ("normlab_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what << ": sizes differ";
  int bad = 0;
  double max_diff = 0.0;
  std::string report;
  for (size_t i = 0; i < got.size(); ++i) {
    double diff = std::fabs(got[i] - want[i]);
    bool ok =
        diff <= atol + rtol * std::fabs(want[i]) && std::isfinite(got[i]) == std::isfinite(want[i]);
    if (!(diff <= max_diff)) max_diff = diff;
    if (!ok && ++bad <= 5) {
      char line[160];
      std::snprintf(line, sizeof line, "\n  [%zu] got %.12g want %.12g diff %.3g", i, got[i],
                    want[i], diff);
      report += line;
    }
  }
  if (bad) {
    ADD_FAILURE() << what << ": " << bad << " of " << got.size() << " values outside atol " << atol
                  << " + rtol " << rtol << "*|want|; max diff " << max_diff << report;
  }
}

std::vector<double> numeric_grad(Tensor& x, const std::function<double()>& loss, double h) {
  double* p = x.data<double>();
  std::vector<double> g(static_cast<size_t>(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) {
    double saved = p[i];
    p[i] = saved + h;
    double lp = loss();
    p[i] = saved - h;
    double lm = loss();
    p[i] = saved;
    g[static_cast<size_t>(i)] = (lp - lm) / (2 * h);
  }
  return g;
}


namespace {

std::string quote(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t\n'\"\\$`;&|<>()*?") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// stdin_text goes through a temporary file rather than a third pipe: it is written before the
// child starts, so nothing has to interleave writing stdin with reading stdout/stderr.
int stdin_fd(const std::string& text) {
  if (text.empty()) return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  char path[] = "/tmp/normlab_test_stdin_XXXXXX";
  int fd = ::mkstemp(path);
  if (fd < 0) throw std::runtime_error(std::string("mkstemp: ") + std::strerror(errno));
  ::unlink(path);
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("write: ") + std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  return fd;
}

}  // namespace

CliResult run_program(const std::string& program, const std::vector<std::string>& args,
                      const RunOptions& options) {
  CliResult r;
  r.command = quote(program);
  for (const auto& a : args) r.command += " " + quote(a);

  // Everything the child needs is built before fork: only async-signal-safe calls after it.
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  std::map<std::string, std::string> env_map;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env_map[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options.env) env_map[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env_map) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
  int in_fd = stdin_fd(options.stdin_text);
  if (in_fd < 0) throw std::runtime_error(std::string("stdin: ") + std::strerror(errno));

  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::dup2(in_fd, STDIN_FILENO);
    ::dup2(out_pipe[1], STDOUT_FILENO);
    ::dup2(err_pipe[1], STDERR_FILENO);
    if (!options.cwd.empty() && ::chdir(options.cwd.c_str()) != 0) _exit(126);
    ::execve(program.c_str(), argv.data(), envp.data());
    _exit(127);  // exec failed: the shell's convention for "command not found"
  }
  ::close(in_fd);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);

  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(options.timeout_s));
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      ::kill(pid, SIGKILL);
      r.timed_out = true;
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
        ::close(fds[i].fd);
        fds[i].fd = -1;  // poll ignores negative fds
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = 128 + WTERMSIG(status);
  }
  return r;
}

CliResult run_cli(const std::vector<std::string>& args, const RunOptions& options) {
  // NORMLAB_TEST_BINARY replays the CLI tests against another build (e.g. an older commit's, to
  // see that a new regression case failed there).
  const char* other = std::getenv("NORMLAB_TEST_BINARY");
  return run_program(other && *other ? other : NORMLAB_BINARY, args, options);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

bool is_sha256_hex(const std::string& text) {
  if (text.size() != 64) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

void expect_one_error_line(const CliResult& r, const std::string& says, int code) {
  EXPECT_FALSE(r.timed_out) << describe(r);
  EXPECT_EQ(r.exit_code, code) << describe(r);
  EXPECT_EQ(r.out, "") << describe(r);
  EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << describe(r);
  EXPECT_NE(r.err.find(says), std::string::npos) << "expected the error to say '" << says << "': " << describe(r);
}

std::string describe(const CliResult& r) {
  std::string s = "command: " + r.command + "\nexit code: " + std::to_string(r.exit_code);
  if (r.timed_out) s += " (timed out, killed)";
  s += "\n--- stdout ---\n" + r.out + "\n--- stderr ---\n" + r.err + "\n";
  return s;
}

bool wait_until(const std::function<bool()>& ready, const std::string& what, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  while (!ready()) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_s) {
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", timeout_s);
      ADD_FAILURE() << "gave up after " << limit << " s waiting for " << what;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace normlab::test
