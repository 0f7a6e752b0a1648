// The sweep runner: each point is a child process (`normlab train --config points/<hash>.json --out
// runs/<name> --force -q`), `jobs` at once. A crash or kill of one child is recorded (exit code or
// signal, the tail of its output) and the sweep goes on. SIGINT/SIGTERM/SIGHUP are forwarded to the
// children; their points end as interrupted and the sweep returns promptly.
//
// The loop: start children up to `jobs`; wait on a self-pipe that the SIGCHLD/SIGINT/SIGTERM/SIGHUP
// handlers write to (or 250 ms, for the progress tick); reap with waitpid(WNOHANG).
#include <fmt/ranges.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "normlab/config.h"
#include "normlab/error.h"
#include "normlab/stats.h"
#include "normlab/io.h"
#include "normlab/run.h"
#include "normlab/sweep.h"
#include "normlab/system.h"
#include "sweep_internal.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

void check_run_options(const SweepRunOptions& opt) {
  NL_USAGE(opt.jobs >= 1, "--jobs must be >= 1 (points at once), got {}", opt.jobs);
  // Checked here, not by each child: a value every child refuses would fail every point.
  NL_USAGE(opt.threads >= 1 && opt.threads <= kMaxThreads, "--threads must be from 1 to {} (threads per point), got {}",
           kMaxThreads, opt.threads);
  if (!opt.tensorboard.empty()) {
    // What every child's `train --tensorboard` would refuse, refused once before the sweep starts.
    std::error_code ec;
    NL_USAGE(!fs::exists(opt.tensorboard, ec) || fs::is_directory(opt.tensorboard, ec), "--tensorboard '{}' is not a directory",
             shown(opt.tensorboard, 200));
    const fs::path tb = fs::absolute(opt.tensorboard).lexically_normal();
    const fs::path runs = fs::absolute(opt.dir).lexically_normal() / "runs";
    const fs::path rel = tb.lexically_relative(runs);
    NL_USAGE(rel.empty() || *rel.begin() == "..", "--tensorboard '{}' is inside the sweep's runs/ (which holds only its points)",
             shown(opt.tensorboard, 200));
    const std::string inside = enclosing_run_or_sweep(opt.tensorboard);
    NL_USAGE(inside.empty(), "--tensorboard '{}' is inside '{}' (a run directory, or a sweep's runs/, holds only runs)",
             shown(opt.tensorboard, 200), shown(inside, 200));
    check_output_dir(opt.tensorboard, "--tensorboard");
  }
}

namespace {

volatile sig_atomic_t g_signal = 0;  // SIGINT, SIGTERM or SIGHUP received
int g_wake_fd = -1;                  // write end of the self-pipe

extern "C" void on_signal(int sig) {
  int saved = errno;
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) g_signal = sig;
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
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalScope() {
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
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
  // SIGHUP (the terminal or an ssh session going away) stops a sweep as SIGTERM does, as it stops train.
  static constexpr int kCount = 4;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  int pipe_[2] = {-1, -1};
  struct sigaction old_[kCount];
};

struct Running {
  size_t point;
  clock_type::time_point start;
  int lock_fd;  // the point's lock, held until it is recorded as ended
};

// The points that other sweeps (another process of the same shard) have started since this one chose
// its points: the start records appended to the manifest since then, read on as it grows (each line once).
class StartedElsewhere {
 public:
  StartedElsewhere(std::string path, std::string me) : path_(std::move(path)), me_(std::move(me)) {
    struct stat st {};
    if (::stat(path_.c_str(), &st) == 0) read_to_ = st.st_size;
  }
  bool contains(const std::string& hash) {
    std::ifstream in(path_, std::ios::binary);
    in.seekg(read_to_);
    std::string line;
    while (in && std::getline(in, line) && !in.eof()) {  // a line without its newline is still being written
      read_to_ += static_cast<std::streamoff>(line.size() + 1);
      try {
        json j = json::parse(line);
        if (j.value("event", "") == "start" && j.value("sweep", "") != me_) hashes_.insert(j.value("hash", ""));
      } catch (const std::exception&) {
        // a torn line (a killed writer) is not a record
      }
    }
    return hashes_.count(hash) > 0;
  }

 private:
  std::string path_, me_;
  std::streamoff read_to_ = 0;
  std::set<std::string> hashes_;
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
  for (const auto& [partial, pid] : partials_of(run.string())) fs::remove_all(partial, ec);
}

constexpr auto num = json_number<json>;

// One sweep's run of its points: a queue of points, at most opt.jobs children at a time, the
// manifest's start and end records, and a stop (a signal, or a failure of the sweep's own) that
// forwards the signal to every child and reaps them all before it returns.
class SweepScheduler {
 public:
  SweepScheduler(const SweepPlan& plan, const std::vector<size_t>& todo, const SweepRunOptions& opt,
                 const SweepCallbacks& cb, std::string exe)
      : plan_(plan), opt_(opt), cb_(cb), exe_(std::move(exe)), shard_text_(fmt::format("{}/{}", opt.shard.index, opt.shard.count)),
        host_(host_name()), me_(fmt::format("{}:{}", host_, ::getpid())),
        started_elsewhere_((fs::path(opt.dir) / "manifest.jsonl").string(), me_), queue_(todo.begin(), todo.end()) {
    report_.progress.total = todo.size();
  }

  SweepRunReport run() {
    SignalScope signals;
    auto last_tick = clock_type::now();
    while (true) {
      if (g_signal != 0 && !stopping_) {
        report_.signal = g_signal;
        stop(g_signal);
      }
      if (!stopping_) guarded([&] { fill_slots(); });
      guarded([&] { reap(); });
      if (running_.empty() && (queue_.empty() || stopping_)) break;
      if (stopping_ && clock_type::now() > kill_deadline_)
        for (const auto& [pid, run] : running_) ::kill(pid, SIGKILL);
      signals.wait(250);
      guarded([&] { reap(); });
      if (cb_.on_tick && clock_type::now() - last_tick > std::chrono::milliseconds(200)) {
        update_progress();
        cb_.on_tick(report_.progress);
        last_tick = clock_type::now();
      }
    }
    update_progress();
    if (error_) std::rethrow_exception(error_);
    return report_;
  }

 private:
  static std::string host_name() {
    char host[256] = {0};
    ::gethostname(host, sizeof host - 1);
    return host;
  }

  void update_progress() {
    SweepProgress& pr = report_.progress;
    pr.running = running_.size();
    pr.elapsed_s = std::chrono::duration<double>(clock_type::now() - t0_).count();
    if (finished_timed_ == 0) return;
    const double mean = finished_seconds_ / static_cast<double>(finished_timed_);
    const size_t left = queue_.size() + running_.size();
    pr.eta_s = mean * static_cast<double>(left) /
               static_cast<double>(std::min<size_t>(static_cast<size_t>(opt_.jobs), std::max<size_t>(1, left)));
  }

  void fill_slots() {
    while (running_.size() < static_cast<size_t>(opt_.jobs) && !queue_.empty()) {
      size_t i = queue_.front();
      queue_.pop_front();
      if (!launch(i)) {
        --report_.progress.total;
        ++report_.progress.skipped;
      }
    }
  }

  // The child's command line: train the point's config into its run directory.
  std::vector<std::string> train_args(const SweepPoint& p, const std::string& cfg_path, const fs::path& rd) const {
    std::vector<std::string> args = {exe_, "train", "--config", cfg_path, "--out", rd.string(), "--force", "-q"};
    if (opt_.device != "cpu") {
      args.push_back("--device");
      args.push_back(opt_.device);
    }
    if (opt_.tf32) args.push_back("--tf32");
    if (!opt_.tensorboard.empty()) {
      args.push_back("--tensorboard");
      args.push_back(opt_.tensorboard + "/" + p.name);
    }
    return args;
  }

  // Returns false (and starts nothing) when another process holds the point or has started it.
  bool launch(size_t i) {
    const SweepPoint& p = plan_.points[i];
    const std::string lock_path = (fs::path(opt_.dir) / "points" / (p.hash + ".lock")).string();
    const int lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    NL_USAGE(lock_fd >= 0, "cannot open '{}': {}", shown(lock_path, 200), std::strerror(errno));
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0 || started_elsewhere_.contains(p.hash)) {
      ::close(lock_fd);
      return false;
    }
    struct LockGuard {  // until the child runs, then Running owns the lock
      int fd;
      ~LockGuard() {
        if (fd >= 0) ::close(fd);
      }
    } guard{lock_fd};
    const fs::path rd = run_dir(opt_.dir, p);
    std::error_code ec;
    fs::create_directories(rd.parent_path(), ec);
    NL_USAGE(!ec, "cannot create '{}': {}", shown(rd.parent_path().string(), 200), ec.message());
    remove_partials(rd);
    TrainConfig cfg = p.config;
    cfg.threads = opt_.threads;
    const std::string cfg_path = point_config_path(opt_.dir, p);
    write_file_atomic(cfg_path, config_to_json(cfg) + "\n");
    ChildSpec child;
    child.argv = train_args(p, cfg_path, rd);
    child.stdout_path = child.stderr_path = point_log_path(opt_.dir, p);
    // Own process group: a terminal's Ctrl-C reaches the sweep, which forwards it. Dying with the
    // parent: a sweep killed outright (SIGKILL) takes its children with it.
    child.own_process_group = child.die_with_parent = true;
    const pid_t pid = start_child(child);
    running_[pid] = {i, clock_type::now(), lock_fd};
    guard.fd = -1;
    json start{{"event", "start"}, {"point", p.name},        {"hash", p.hash}, {"shard", shard_text_}, {"pid", pid},
               {"time", now_iso8601()}, {"host", host_}, {"sweep", me_},   {"command", child.argv}};
    manifest_append(opt_.dir, start.dump());
    return true;
  }

  // How a child ended: its run's status when it exited 0 (failed when it left no whole run).
  PointOutcome outcome_of(const Running& r, int status) const {
    const SweepPoint& p = plan_.points[r.point];
    PointOutcome o;
    o.point = r.point;
    o.seconds = std::chrono::duration<double>(clock_type::now() - r.start).count();
    o.metric = NAN;
    if (WIFEXITED(status)) {
      o.exit_code = WEXITSTATUS(status);
      if (o.exit_code == 0) {
        RunRecord rec = read_run(opt_.dir, p, "final_val_loss");
        o.status = rec.status.empty() ? "failed" : rec.status;
        o.metric = rec.metric;
        o.diverged_step = rec.diverged_step;
        if (rec.status.empty()) o.stderr_tail = "train exited 0 but left no whole run directory of this config";
      } else {
        o.status = stopping_ ? "interrupted" : "failed";
      }
    } else if (WIFSIGNALED(status)) {
      o.signal = WTERMSIG(status);
      o.status = (stopping_ || o.signal == SIGINT || o.signal == SIGTERM || o.signal == SIGHUP) ? "interrupted" : "failed";
    } else {
      o.status = "failed";
    }
    if (o.status != "completed" && o.status != "diverged" && o.stderr_tail.empty()) o.stderr_tail = tail_of(point_log_path(opt_.dir, p));
    return o;
  }

  json end_record(const SweepPoint& p, pid_t pid, const PointOutcome& o) const {
    json end{{"event", "end"},
             {"point", p.name},
             {"hash", p.hash},
             {"shard", shard_text_},
             {"pid", pid},
             {"time", now_iso8601()},
             {"status", o.status},
             {"exit_code", o.exit_code >= 0 ? json(o.exit_code) : json(nullptr)},
             {"signal", o.signal ? json(strsignal(o.signal)) : json(nullptr)},
             {"seconds", o.seconds},
             {"final_val_loss", num(o.metric)},
             {"diverged_step", o.diverged_step >= 0 ? json(o.diverged_step) : json(nullptr)}};
    if (!o.stderr_tail.empty()) end["stderr_tail"] = o.stderr_tail;
    return end;
  }

  void count(const PointOutcome& o) {
    SweepProgress& pr = report_.progress;
    ++pr.finished;
    if (o.status == "completed") ++pr.completed;
    else if (o.status == "diverged") ++pr.diverged;
    else if (o.status == "failed") ++pr.failed;
    else ++pr.interrupted;
    if (o.status != "interrupted") {
      finished_seconds_ += o.seconds;
      ++finished_timed_;
    }
  }

  void finish(pid_t pid, int status) {
    auto it = running_.find(pid);
    if (it == running_.end()) return;
    const Running r = it->second;
    running_.erase(it);
    // Released after the end record is written (or failed to be): a process waiting for the point
    // then finds it started here.
    struct Unlock {
      int fd;
      ~Unlock() { ::close(fd); }
    } unlock{r.lock_fd};
    const SweepPoint& p = plan_.points[r.point];
    const PointOutcome o = outcome_of(r, status);
    manifest_append(opt_.dir, end_record(p, pid, o).dump());
    count(o);
    update_progress();
    if (cb_.on_end) cb_.on_end(p, o, report_.progress);
  }

  void reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) finish(pid, status);
  }

  void stop(int sig) {
    stopping_ = true;
    for (const auto& [pid, run] : running_) ::kill(pid, sig);
    kill_deadline_ = clock_type::now() + std::chrono::seconds(5);
  }

  // A failure of the sweep's own (the manifest, a point's config: a full disk, a file-size limit)
  // stops it as a signal would, and is thrown once every child is reaped: none is left running.
  void guarded(const std::function<void()>& f) {
    try {
      f();
    } catch (...) {
      if (!error_) error_ = std::current_exception();
      if (!stopping_) stop(SIGTERM);
    }
  }

  const SweepPlan& plan_;
  const SweepRunOptions& opt_;
  const SweepCallbacks& cb_;
  const std::string exe_, shard_text_, host_, me_;  // me_: who wrote a manifest line
  StartedElsewhere started_elsewhere_;
  SweepRunReport report_;
  std::deque<size_t> queue_;
  std::map<pid_t, Running> running_;
  const clock_type::time_point t0_ = clock_type::now();
  double finished_seconds_ = 0;  // summed durations of points that ran to their end
  size_t finished_timed_ = 0;
  bool stopping_ = false;
  clock_type::time_point kill_deadline_{};
  std::exception_ptr error_;
};

}  // namespace

int exit_status(const SweepRunReport& r) {
  if (r.signal) return 128 + r.signal;
  return r.progress.failed ? 1 : 0;
}

SweepRunReport run_sweep(const SweepPlan& plan, const std::vector<size_t>& todo, const SweepRunOptions& opt,
                         const SweepCallbacks& cb) {
  check_run_options(opt);
  const std::string exe = opt.exe.empty() ? self_exe() : opt.exe;
  NL_CHECK(!exe.empty(), "cannot read /proc/self/exe: the sweep cannot find normlab to run its points");
  return SweepScheduler(plan, todo, opt, cb, exe).run();
}

}  // namespace normlab
