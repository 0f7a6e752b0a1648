// The machine's available memory, the running executable and child processes (system.h).
#include "normlab/system.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "normlab/error.h"

namespace normlab {

namespace {

// MemAvailable from /proc/meminfo, in bytes (0 when unknown).
int64_t meminfo_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t value = 0;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

// This process's mapped address space (VmSize), in bytes (0 when unknown).
int64_t mapped_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmSize:", 0) == 0) return std::strtoll(line.c_str() + 7, nullptr, 10) * 1024;
  return 0;
}

}  // namespace

int64_t address_space_left_bytes() {
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) return -1;
  const int64_t limit = as.rlim_cur > static_cast<rlim_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(as.rlim_cur);
  return std::max<int64_t>(0, limit - mapped_bytes());
}

int64_t available_memory_bytes() {
  const int64_t avail = meminfo_available_bytes(), left = address_space_left_bytes();
  if (left < 0) return avail;
  return avail > 0 ? std::min(avail, left) : left;
}

int64_t memory_budget_bytes() {
  return static_cast<int64_t>(kMemoryBudgetShare * static_cast<double>(available_memory_bytes()));
}

std::string memory_budget_excess(double bytes) {
  const int64_t avail = available_memory_bytes();
  if (avail <= 0 || bytes < kMemoryBudgetShare * static_cast<double>(avail)) return "";  // 0: nothing known
  const double gib = double(int64_t{1} << 30);
  const int64_t left = address_space_left_bytes();
  const char* which = left >= 0 && left <= avail ? "address space the limit (ulimit -v) leaves" : "memory available";
  return fmt::format("needs about {:.3g} GiB, more than {:.0f}% of the {:.3g} GiB of {}: too large for memory", bytes / gib,
                     100 * kMemoryBudgetShare, static_cast<double>(avail) / gib, which);
}

std::string self_exe() {
  char buf[4096];
  const ssize_t len = ::readlink("/proc/self/exe", buf, sizeof(buf));
  return len > 0 && static_cast<size_t>(len) < sizeof(buf) ? std::string(buf, static_cast<size_t>(len)) : "";
}

double process_cpu_seconds() {
  rusage self{};
  ::getrusage(RUSAGE_SELF, &self);
  return static_cast<double>(self.ru_utime.tv_sec + self.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(self.ru_utime.tv_usec + self.ru_stime.tv_usec);
}

namespace {

// The program execv will run: argv0 itself when it names a path, else the first executable of
// that name in PATH (execvp's search, done before the fork: the child may only make
// async-signal-safe calls). Unchanged when not found: execv then fails in the child, exit 127.
std::string resolve_program(const std::string& argv0) {
  if (argv0.find('/') != std::string::npos) return argv0;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t colon = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = colon > start ? dirs.substr(start, colon - start) : ".";
    const std::string candidate = dir + "/" + argv0;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = colon + 1;
  }
  return argv0;
}

int open_output(const std::string& path, bool append) {
  if (path.empty()) return ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  NL_USAGE(fd >= 0, "cannot open '{}': {}", shown(path, 200), std::strerror(errno));
  return fd;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

int usable_cpus() {
  if (const char* c = std::getenv("SLURM_CPUS_PER_TASK")) {
    const int n = std::atoi(c);
    if (n > 0) return n;
  }
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

namespace {

// The parent's environment with `set` applied, as NAME=value strings; built before fork, since
// the child may make only async-signal-safe calls.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(set.begin(), set.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  return env;
}

}  // namespace

pid_t start_child(const ChildSpec& spec) {
  NL_CHECK(!spec.argv.empty(), "start_child: no program given");
  const std::string program = resolve_program(spec.argv[0]);
  const std::string failed = "cannot run " + spec.argv[0] + "\n";
  Fd in{::open("/dev/null", O_RDONLY | O_CLOEXEC)}, out{open_output(spec.stdout_path, spec.append)}, err;
  // Close-on-exec like every descriptor here: the program gets only 0, 1 and 2.
  err.fd = spec.stderr_path == spec.stdout_path ? ::fcntl(out.fd, F_DUPFD_CLOEXEC, 0)
                                                : open_output(spec.stderr_path, spec.append);
  std::vector<std::string> args = spec.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text = child_environment(spec.env);
  std::vector<char*> envp;
  for (std::string& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();

  // Blocked across fork: a signal that arrived before the child has dropped the parent's handlers
  // would run them in the child and be lost; unblocked in the child after the reset, it is
  // delivered with its default action instead.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop_signals, sig);
  ::pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  const pid_t pid = ::fork();
  const int fork_errno = errno;
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  NL_CHECK(pid >= 0, "fork: {}", std::strerror(fork_errno));
  if (pid == 0) {
    // Only async-signal-safe calls from here on.
    if (spec.own_process_group) ::setpgid(0, 0);
    if (spec.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(127);  // the parent died before the request took effect
    }
    // The parent's handlers go (they belong to its memory); a signal it ignores stays ignored, as
    // exec would keep it (nohup's SIGHUP reaches no child either).
    struct sigaction dfl {}, current {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler != SIG_IGN) ::sigaction(sig, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    ::dup2(in.fd, STDIN_FILENO);
    ::dup2(out.fd, STDOUT_FILENO);
    ::dup2(err.fd, STDERR_FILENO);
    ::execve(program.c_str(), argv.data(), envp.data());
    ssize_t ignored = ::write(STDERR_FILENO, failed.data(), failed.size());
    (void)ignored;
    _exit(127);
  }
  return pid;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 127;
}

int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 127;
  return exit_code_of(status);
}

int run_child(const ChildSpec& spec) { return wait_child(start_child(spec)); }

bool process_alive(long pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  if (!(comm >> name)) return true;  // no /proc: trust kill()
  std::ifstream self("/proc/self/comm");
  std::string mine;
  return !(self >> mine) || name == mine;
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace normlab
