// The sweep runner: each point is a child process (`normlab train --config points/<hash>.json --out
// runs/<name> --force -q`), `jobs` at once. A crash or kill of one child is recorded (exit code or
// signal, the tail of its output) and the sweep goes on. SIGINT/SIGTERM are forwarded to the children;
// their points end as interrupted and the sweep returns promptly.
//
// The loop: start children up to `jobs`; wait on a self-pipe that the SIGCHLD/SIGINT/SIGTERM handlers
// write to (or 250 ms, for the progress tick); reap with waitpid(WNOHANG).
#include <fmt/ranges.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "normlab/config.h"
#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/sweep.h"
#include "sweep_internal.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

std::string self_exe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  NL_CHECK(!ec, "cannot read /proc/self/exe: {}", ec.message());
  return p.string();
}

namespace {

volatile sig_atomic_t g_signal = 0;  // SIGINT or SIGTERM received
int g_wake_fd = -1;                  // write end of the self-pipe

extern "C" void on_signal(int sig) {
  int saved = errno;
  if (sig == SIGINT || sig == SIGTERM) g_signal = sig;
  if (g_wake_fd >= 0) {
    char c = 0;
    ssize_t ignored = ::write(g_wake_fd, &c, 1);
    (void)ignored;
  }
  errno = saved;
}

// Installs the handlers for the duration of run_sweep and restores the previous ones after.
class SignalScope {
 public:
  SignalScope() {
    NL_CHECK(::pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2: {}", std::strerror(errno));
    g_wake_fd = pipe_[1];
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (int i = 0; i < 3; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    g_wake_fd = -1;
    ::close(pipe_[0]);
    ::close(pipe_[1]);
  }
  // Waits until a signal arrives or timeout_ms passes; drains the pipe.
  void wait(int timeout_ms) {
    pollfd p{pipe_[0], POLLIN, 0};
    ::poll(&p, 1, timeout_ms);
    char buf[64];
    while (::read(pipe_[0], buf, sizeof buf) > 0) {
    }
  }

 private:
  static constexpr int kSignals[3] = {SIGINT, SIGTERM, SIGCHLD};
  int pipe_[2] = {-1, -1};
  struct sigaction old_[3];
};

struct Running {
  size_t point;
  clock_type::time_point start;
};

// The last `max_lines` lines of a log file (at most 4 KiB).
std::string tail_of(const std::string& path, size_t max_lines = 12) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  std::streamoff from = std::max<std::streamoff>(0, size - 4096);
  in.seekg(from);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\n') text.pop_back();
  size_t pos = text.size(), lines = 0;
  while (pos > 0 && lines < max_lines) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) {
      pos = 0;
      break;
    }
    ++lines;
  }
  return text.substr(pos == 0 ? 0 : pos + 1);
}

// Stale `<run>.partial.<pid>` directories of a point: left by a child killed with its sweep.
void remove_partials(const fs::path& run) {
  std::error_code ec;
  const std::string prefix = run.filename().string() + ".partial.";
  if (!fs::is_directory(run.parent_path(), ec)) return;
  for (const auto& e : fs::directory_iterator(run.parent_path(), ec))
    if (e.path().filename().string().rfind(prefix, 0) == 0) fs::remove_all(e.path(), ec);
}

json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

}  // namespace

SweepRunReport run_sweep(const SweepPlan& plan, const std::vector<size_t>& todo, const SweepRunOptions& opt,
                         const SweepCallbacks& cb) {
  NL_CHECK(opt.jobs >= 1, "jobs must be >= 1");
  const std::string exe = opt.exe.empty() ? self_exe() : opt.exe;
  const std::string shard_text = fmt::format("{}/{}", opt.shard.index, opt.shard.count);
  SignalScope signals;

  SweepRunReport report;
  SweepProgress& pr = report.progress;
  pr.total = todo.size();
  std::deque<size_t> queue(todo.begin(), todo.end());
  std::map<pid_t, Running> running;
  const auto t0 = clock_type::now();
  double finished_seconds = 0;  // summed durations of points that ran to their end
  size_t finished_timed = 0;
  bool stopping = false;
  clock_type::time_point kill_deadline{};

  auto update_progress = [&] {
    pr.running = running.size();
    pr.elapsed_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    if (finished_timed > 0) {
      const double mean = finished_seconds / static_cast<double>(finished_timed);
      const double left = static_cast<double>(queue.size() + running.size());
      pr.eta_s = mean * left / static_cast<double>(std::min<size_t>(static_cast<size_t>(opt.jobs), std::max<size_t>(1, queue.size() + running.size())));
    }
  };

  auto launch = [&](size_t i) {
    const SweepPoint& p = plan.points[i];
    const fs::path rd = run_dir(opt.dir, p);
    std::error_code ec;
    fs::create_directories(rd.parent_path(), ec);
    NL_CHECK(!ec, "cannot create {}: {}", rd.parent_path().string(), ec.message());
    remove_partials(rd);
    TrainConfig cfg = p.config;
    cfg.threads = opt.threads;
    const std::string cfg_path = point_config_path(opt.dir, p);
    write_file_atomic(cfg_path, config_to_json(cfg) + "\n");
    const std::string log_path = point_log_path(opt.dir, p);
    int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    NL_CHECK(log_fd >= 0, "cannot open {}: {}", log_path, std::strerror(errno));
    int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

    std::vector<std::string> args = {exe, "train", "--config", cfg_path, "--out", rd.string(), "--force", "-q"};
    if (opt.device != "cpu") {
      args.push_back("--device");
      args.push_back(opt.device);
    }
    if (opt.tf32) args.push_back("--tf32");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();

    pid_t pid = ::fork();
    NL_CHECK(pid >= 0, "fork: {}", std::strerror(errno));
    if (pid == 0) {
      // Only async-signal-safe calls here. Own process group: a terminal's Ctrl-C reaches the sweep,
      // which forwards it. PDEATHSIG: a sweep killed outright (SIGKILL) takes its children with it.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) _exit(127);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGINT, &dfl, nullptr);
      ::sigaction(SIGTERM, &dfl, nullptr);
      ::dup2(null_fd, STDIN_FILENO);
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      ::execv(argv[0], argv.data());
      const char msg[] = "sweep: cannot exec normlab\n";
      ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
      (void)ignored;
      _exit(127);
    }
    ::close(log_fd);
    ::close(null_fd);
    running[pid] = {i, clock_type::now()};
    json start{{"event", "start"}, {"point", p.name},  {"hash", p.hash},        {"shard", shard_text},
               {"pid", pid},        {"time", now_iso8601()}, {"host", ""}, {"command", args}};
    char host[256] = {0};
    if (::gethostname(host, sizeof host - 1) == 0) start["host"] = host;
    manifest_append(opt.dir, start.dump());
  };

  auto finish = [&](pid_t pid, int status) {
    auto it = running.find(pid);
    if (it == running.end()) return;
    const Running r = it->second;
    running.erase(it);
    const SweepPoint& p = plan.points[r.point];
    PointOutcome o;
    o.point = r.point;
    o.seconds = std::chrono::duration<double>(clock_type::now() - r.start).count();
    o.metric = NAN;
    if (WIFEXITED(status)) {
      o.exit_code = WEXITSTATUS(status);
      if (o.exit_code == 0) {
        RunRecord rec = read_run(opt.dir, p, "final_val_loss");
        o.status = rec.status.empty() ? "failed" : rec.status;
        o.metric = rec.metric;
        o.diverged_step = rec.diverged_step;
        if (rec.status.empty()) o.stderr_tail = "train exited 0 but left no whole run directory of this config";
      } else {
        o.status = stopping ? "interrupted" : "failed";
      }
    } else if (WIFSIGNALED(status)) {
      o.signal = WTERMSIG(status);
      o.status = (stopping || o.signal == SIGINT || o.signal == SIGTERM || o.signal == SIGHUP) ? "interrupted" : "failed";
    } else {
      o.status = "failed";
    }
    if (o.status != "completed" && o.status != "diverged" && o.stderr_tail.empty()) o.stderr_tail = tail_of(point_log_path(opt.dir, p));
    json end{{"event", "end"},
             {"point", p.name},
             {"hash", p.hash},
             {"shard", shard_text},
             {"pid", pid},
             {"time", now_iso8601()},
             {"status", o.status},
             {"exit_code", o.exit_code >= 0 ? json(o.exit_code) : json(nullptr)},
             {"signal", o.signal ? json(strsignal(o.signal)) : json(nullptr)},
             {"seconds", o.seconds},
             {"final_val_loss", num(o.metric)},
             {"diverged_step", o.diverged_step >= 0 ? json(o.diverged_step) : json(nullptr)}};
    if (!o.stderr_tail.empty()) end["stderr_tail"] = o.stderr_tail;
    manifest_append(opt.dir, end.dump());

    ++pr.finished;
    if (o.status == "completed") ++pr.completed;
    else if (o.status == "diverged") ++pr.diverged;
    else if (o.status == "failed") ++pr.failed;
    else ++pr.interrupted;
    if (o.status != "interrupted") {
      finished_seconds += o.seconds;
      ++finished_timed;
    }
    update_progress();
    if (cb.on_end) cb.on_end(p, o, pr);
  };

  auto reap = [&] {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) finish(pid, status);
  };

  auto last_tick = clock_type::now();
  while (true) {
    if (g_signal != 0 && !stopping) {
      stopping = true;
      report.signal = g_signal;
      for (const auto& [pid, run] : running) ::kill(pid, g_signal);
      kill_deadline = clock_type::now() + std::chrono::seconds(5);
    }
    if (!stopping) {
      while (running.size() < static_cast<size_t>(opt.jobs) && !queue.empty()) {
        size_t i = queue.front();
        queue.pop_front();
        launch(i);
      }
    }
    reap();
    if (running.empty() && (queue.empty() || stopping)) break;
    if (stopping && clock_type::now() > kill_deadline)
      for (const auto& [pid, run] : running) ::kill(pid, SIGKILL);
    signals.wait(250);
    reap();
    if (cb.on_tick && clock_type::now() - last_tick > std::chrono::milliseconds(200)) {
      update_progress();
      cb.on_tick(pr);
      last_tick = clock_type::now();
    }
  }
  update_progress();
  return report;
}

}  // namespace normlab
