// system.h: the memory budget, the running executable and child processes, each defined once for
// every layer (bench, sweep, train's checks, the CUDA loader).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>

#include "normlab/error.h"
#include "normlab/system.h"
#include "test_util.h"

namespace fs = std::filesystem;
using normlab::ChildSpec;

TEST(System, MemoryBudgetIsSixtyPercentOfTheAvailableMemory) {
  const int64_t avail = normlab::available_memory_bytes();
  ASSERT_GT(avail, 0) << "/proc/meminfo has no MemAvailable";
  EXPECT_NEAR(static_cast<double>(normlab::memory_budget_bytes()), 0.6 * static_cast<double>(avail), 1e-3 * avail);
  EXPECT_EQ(normlab::memory_budget_excess(0), "");
  EXPECT_EQ(normlab::memory_budget_excess(0.5 * static_cast<double>(avail)), "");
  const std::string excess = normlab::memory_budget_excess(0.7 * static_cast<double>(avail));
  EXPECT_NE(excess.find("more than 60% of the"), std::string::npos) << excess;
  EXPECT_NE(excess.find("too large for memory"), std::string::npos) << excess;
}

TEST(System, SelfExeIsThisTestProgram) {
  const std::string exe = normlab::self_exe();
  EXPECT_EQ(fs::path(exe).filename(), "test_core") << exe;
  EXPECT_TRUE(fs::path(exe).is_absolute()) << exe;
}

TEST(System, ProcessCpuSecondsGrowsWithWork) {
  const double before = normlab::process_cpu_seconds();
  EXPECT_GE(before, 0);
  volatile double x = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (normlab::process_cpu_seconds() < before + 0.02 && std::chrono::steady_clock::now() < give_up) x = x + 1;
  EXPECT_GE(normlab::process_cpu_seconds(), before + 0.02);
}

// sweep's default --jobs: a Slurm job's CPUs when it says, else what the affinity mask allows.
TEST(System, UsableCpusIsSlurmsShareOrTheAffinityMask) {
  ::unsetenv("SLURM_CPUS_PER_TASK");
  cpu_set_t set;
  ASSERT_EQ(::sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(normlab::usable_cpus(), CPU_COUNT(&set));
  ::setenv("SLURM_CPUS_PER_TASK", "3", 1);
  EXPECT_EQ(normlab::usable_cpus(), 3);
  ::setenv("SLURM_CPUS_PER_TASK", "junk", 1);
  EXPECT_EQ(normlab::usable_cpus(), CPU_COUNT(&set));
  ::unsetenv("SLURM_CPUS_PER_TASK");
}

TEST(System, ChildOutputGoesToTheFilesAndItsExitCodeComesBack) {
  const fs::path dir = normlab::test::fresh_dir("system_child");
  fs::create_directories(dir);
  ChildSpec c;
  c.argv = {"sh", "-c", "echo out; echo err >&2; exit 3"};  // found in PATH
  c.stdout_path = (dir / "out").string();
  c.stderr_path = (dir / "err").string();
  EXPECT_EQ(normlab::run_child(c), 3);
  EXPECT_EQ(normlab::test::slurp(dir / "out"), "out\n");
  EXPECT_EQ(normlab::test::slurp(dir / "err"), "err\n");
  c.stderr_path = c.stdout_path;  // one file for both, in the order written
  c.argv = {"/bin/sh", "-c", "echo a; echo b >&2; echo c"};
  EXPECT_EQ(normlab::run_child(c), 0);
  EXPECT_EQ(normlab::test::slurp(dir / "out"), "a\nb\nc\n");
  c.append = true;
  EXPECT_EQ(normlab::run_child(c), 0);
  EXPECT_EQ(normlab::test::slurp(dir / "out"), "a\nb\nc\na\nb\nc\n");
  fs::remove_all(dir);
}

TEST(System, ChildKilledBySignalOrNotRunnable) {
  ChildSpec c;
  c.argv = {"/bin/sh", "-c", "kill -9 $$"};
  EXPECT_EQ(normlab::run_child(c), 128 + SIGKILL);
  c.argv = {"no-such-program-normlab-test"};
  EXPECT_EQ(normlab::run_child(c), 127);
  c.argv = {"/bin/sh", "-c", "read x; exit $?"};  // stdin is /dev/null: read fails at once
  EXPECT_NE(normlab::run_child(c), 0);
}

extern "C" void system_test_handler(int) {}

TEST(System, ChildSignalsHandledHereHaveTheirDefaultActionIgnoredOnesStayIgnored) {
  // A signal this process handles: the child has the default action, so SIGTERM ends it.
  struct sigaction handle {}, ignore {}, old {};
  handle.sa_handler = system_test_handler;
  ::sigaction(SIGTERM, &handle, &old);
  ChildSpec c;
  c.argv = {"/bin/sh", "-c", "kill -TERM $$; sleep 5"};
  c.own_process_group = true;
  EXPECT_EQ(normlab::wait_child(normlab::start_child(c)), 128 + SIGTERM);
  // A signal this process ignores (nohup's SIGHUP): ignored in the child too, as exec keeps it.
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGTERM, &ignore, nullptr);
  c.argv = {"/bin/sh", "-c", "kill -TERM $$; exit 7"};
  EXPECT_EQ(normlab::wait_child(normlab::start_child(c)), 7);
  ::sigaction(SIGTERM, &old, nullptr);
  c.argv = {"/bin/sh", "-c", "set -- $(cat /proc/$$/stat); [ \"$5\" = \"$$\" ]"};  // field 5: the group
  EXPECT_EQ(normlab::run_child(c), 0) << "not the leader of its own process group";
}

// The output file is open in the program as its stdout and stderr only: the descriptors start_child
// opens are close-on-exec (a sweep point's train kept a third handle on its log).
TEST(System, ChildHasTheOutputFileOnlyAsStdoutAndStderr) {
  const fs::path dir = normlab::test::fresh_dir("system_child_fds");
  fs::create_directories(dir);
  ChildSpec c;
  c.argv = {"/bin/sh", "-c", "for f in /proc/$$/fd/*; do readlink $f; done | grep -c /out$"};
  c.stdout_path = (dir / "out").string();
  c.stderr_path = c.stdout_path;
  EXPECT_EQ(normlab::run_child(c), 0);
  EXPECT_EQ(normlab::test::slurp(dir / "out"), "2\n");
  fs::remove_all(dir);
}

TEST(System, AnOutputFileThatCannotBeOpenedIsAUsageError) {
  ChildSpec c;
  c.argv = {"/bin/true"};
  c.stdout_path = "/nonexistent-dir/out";
  EXPECT_THROW(normlab::start_child(c), normlab::UsageError);
}
