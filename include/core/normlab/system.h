// Facts about the machine and the process that several layers need, each defined once here, at the
// lowest layer they all reach: the memory a workload may plan to hold, the running executable, and
// starting a child process.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

// What this process may still allocate, in bytes: MemAvailable from /proc/meminfo, or what the
// address-space limit (RLIMIT_AS, `ulimit -v`) leaves beside what the process has mapped, when
// that is less (0 when neither is known).
int64_t available_memory_bytes();
// What RLIMIT_AS leaves beside the address space mapped now, in bytes; -1 when there is no limit.
int64_t address_space_left_bytes();
// The share of the available memory one workload may plan to hold. Beyond it the machine swaps
// (or the OOM killer ends the process) long after the work started, so each workload estimates
// its own peak and is refused up front instead.
constexpr double kMemoryBudgetShare = 0.6;
// The budget in bytes: kMemoryBudgetShare of available_memory_bytes() (0 when that is unknown).
int64_t memory_budget_bytes();
// "" when `bytes` fits the budget (or the available memory is unknown); otherwise the end of the
// refusal: "needs about 3.2 GiB, more than 60% of the 4.0 GiB of memory available: too large for
// memory". Each workload's message names the workload and its sizes, then this.
std::string memory_budget_excess(double bytes);

// The absolute path of the running executable (/proc/self/exe); "" when it cannot be read.
std::string self_exe();

// CPU time (user + system) this process has used so far, in seconds.
double process_cpu_seconds();

// The CPUs this process may use: Slurm's SLURM_CPUS_PER_TASK when set (a job's share of a node),
// else the scheduler affinity mask (taskset, cgroups), else the hardware count; at least 1.
int usable_cpus();

// A child process: argv[0] is a path, or a name looked up in PATH (resolved before the fork).
struct ChildSpec {
  std::vector<std::string> argv;
  // Files the child's stdout and stderr go to, created or truncated ("": /dev/null). When both
  // name the same file they share one descriptor (the output interleaves as written). stdin is
  // always /dev/null.
  std::string stdout_path, stderr_path;
  bool append = false;          // open them for appending instead of truncating
  bool own_process_group = false;  // a terminal's Ctrl-C reaches the parent only, which forwards it
  bool die_with_parent = false;    // the child gets SIGKILL when the parent dies (PR_SET_PDEATHSIG)
  // Variables set (or replaced) in the child's environment; the rest of the parent's is inherited.
  std::vector<std::pair<std::string, std::string>> env = {};
};
// Starts the child and returns its pid. SIGINT, SIGTERM and SIGHUP have their default action in
// the child (whatever handlers the parent installed) and are blocked across the fork, so a signal
// that arrives meanwhile is delivered to the child as such, never to a handler of the parent's
// running in the child. A program that cannot be run ends the child with exit code 127 and a line
// on its stderr. Throws UsageError when an output file cannot be opened, Error when fork fails.
pid_t start_child(const ChildSpec& spec);
// Waits for the child (retrying on EINTR): its exit code, 128 + the signal that killed it, or 127
// when it cannot be waited for.
int wait_child(pid_t pid);
// waitpid's status as wait_child reports it: the exit code or 128 + the signal.
int exit_code_of(int wait_status);
// start_child then wait_child.
int run_child(const ChildSpec& spec);

// Whether process `pid` exists and runs this same program (a pid the system handed to another
// program since does not count): whose temporary directory a <path>.partial.<pid> still is.
bool process_alive(long pid);

// "SIGINT", "SIGTERM", "SIGHUP", ...: how an interrupted command names the signal that stopped it.
std::string signal_name(int sig);

}  // namespace normlab
