// `report` and `export tensorboard` stopped while they write, as train and convert are
// (tests/bad_inputs/interrupt_test.cpp):
//   - SIGINT, SIGTERM, SIGHUP sent once the command has begun writing (its partial exists, or
//     the export's --out): it
//     exits 128 + the signal with one line and its partial removed, the earlier site or export as
//     it was; or, when the signal lands after its result took its name, exits 0 with the result
//     whole. Never killed by the signal, never a partial left.
//   - SIGKILL leaves at most a partial; a partial site never holds the finished-site marker before
//     its files are whole (the marker is written last), is never taken for a site (`report --out
//     SITE.partial.<pid>` is refused), and the next command into the same place names it.
// The moments are "the writing has begun" (polled), not times: the input is large enough that the
// write takes many polls, and an outcome either way is checked.
//   ./build/test_cli --gtest_filter='*Interrupt*'
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::fresh_dir;
using normlab::test::run_cli;
using normlab::test::slurp;
using normlab::test::split_lines;

namespace {

std::string binary() {
  const char* b = std::getenv("NORMLAB_TEST_BINARY");
  return b && *b ? b : NORMLAB_BINARY;
}

// normlab with args, stdout and stderr to files; returns the pid.
pid_t spawn(const std::vector<std::string>& args, const fs::path& out, const fs::path& err) {
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) _exit(126);
    std::vector<std::string> copy = args;
    std::string prog = binary();
    std::vector<char*> argv = {prog.data()};
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(prog.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// A child being waited for: whether it has ended, and how.
struct Child {
  pid_t pid = -1;
  bool ended = false;
  int status = 0;
  bool poll() {
    if (!ended && ::waitpid(pid, &status, WNOHANG) == pid) ended = true;
    return ended;
  }
  void wait() {
    if (!ended && ::waitpid(pid, &status, 0) == pid) ended = true;
  }
};

// A pid no process has now (a child that has ended and been reaped).
long dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) _exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

// One finished run, copied `n` times into `folder` (r000, r001, ...): an input whose site or export
// takes many files to write.
void make_runs(const fs::path& folder, int n) {
  const fs::path one = folder.parent_path() / "one";
  fs::create_directories(folder);
  auto r = run_cli({"train", "--steps", "4", "--eval_every", "1", "--layers", "3", "--batch_size", "2", "--threads", "1",
                    "--out", one.string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (int i = 0; i < n; ++i) {
    char name[16];
    std::snprintf(name, sizeof name, "r%03d", i);
    fs::copy(one, folder / name, fs::copy_options::recursive);
  }
  fs::remove_all(one);
}

// The site at `dir` is whole: its marker lists exactly the files there, each of its size.
void expect_whole_site(const fs::path& dir) {
  ASSERT_TRUE(fs::is_regular_file(dir / ".normlab-report")) << dir;
  const auto marker = nlohmann::json::parse(slurp(dir / ".normlab-report"), nullptr, false);
  ASSERT_TRUE(marker.is_object() && marker.contains("files")) << dir;
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().filename() == ".normlab-report") continue;
    const std::string rel = e.path().lexically_relative(dir).string();
    EXPECT_TRUE(marker["files"].contains(rel)) << dir << ": " << rel << " is not listed";
    if (marker["files"].contains(rel)) {
      EXPECT_EQ(marker["files"][rel]["bytes"], fs::file_size(e.path())) << rel;
    }
    ++files;
  }
  EXPECT_EQ(marker["files"].size(), files) << dir << ": listed files missing";
}

std::vector<fs::path> entries_named(const fs::path& dir, const std::string& part) {
  std::vector<fs::path> found;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().filename().string().find(part) != std::string::npos) found.push_back(e.path());
  return found;
}

}  // namespace

TEST(ReportInterrupt, SignalsStopItWithThePartialSiteRemoved) {
  const fs::path work = fresh_dir("report_interrupt");
  make_runs(work / "in", 60);
  const fs::path site = work / "site";
  auto r = run_cli({"report", (work / "in").string(), "--out", site.string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  int caught = 0;
  for (int round = 0; round < 2; ++round)
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      SCOPED_TRACE("signal " + std::to_string(sig) + ", round " + std::to_string(round));
      Child c;
      c.pid = spawn({"report", (work / "in").string(), "--out", site.string(), "-q"}, work / "out.txt", work / "err.txt");
      const fs::path partial = site.string() + ".partial." + std::to_string(c.pid);
      ASSERT_TRUE(normlab::test::wait_until([&] { return fs::exists(partial) || c.poll(); }, "the partial site or the end"));
      if (!c.ended) ::kill(c.pid, sig);
      c.wait();
      const std::string err = slurp(work / "err.txt");
      ASSERT_TRUE(WIFEXITED(c.status)) << "killed by signal " << WTERMSIG(c.status) << "; left " << fs::exists(partial);
      const int code = WEXITSTATUS(c.status);
      EXPECT_TRUE(code == 128 + sig || code == 0) << code << ": " << err;
      if (code == 128 + sig) {
        ++caught;
        EXPECT_EQ(split_lines(err).size(), 1u) << err;
        EXPECT_NE(err.find("interrupted by SIG"), std::string::npos) << err;
      }
      EXPECT_FALSE(fs::exists(partial)) << "left " << partial;
      expect_whole_site(site);  // the earlier site, or the new one
      EXPECT_TRUE(entries_named(work, ".partial.").empty());
    }
  std::printf("%d of 6 reports stopped by their signal while writing; the others had finished\n", caught);
  EXPECT_GT(caught, 0) << "no report was stopped while writing: the signal path went untested";
}

TEST(ReportInterrupt, AKilledReportsPartialIsNoSiteAndIsNamed) {
  const fs::path work = fresh_dir("report_kill");
  make_runs(work / "in", 60);
  const fs::path site = work / "site";
  Child c;
  c.pid = spawn({"report", (work / "in").string(), "--out", site.string(), "-q"}, work / "out.txt", work / "err.txt");
  fs::path partial = site.string() + ".partial." + std::to_string(c.pid);
  ASSERT_TRUE(normlab::test::wait_until([&] { return fs::exists(partial) || c.poll(); }, "the partial site or the end"));
  if (!c.ended) ::kill(c.pid, SIGKILL);
  c.wait();
  if (fs::exists(partial)) {
    // Written last: a partial holding the marker holds every file it lists.
    if (fs::exists(partial / ".normlab-report")) expect_whole_site(partial);
  } else {
    // It finished first; a partial like one a kill leaves (its process gone).
    partial = site.string() + ".partial." + std::to_string(dead_pid());
    fs::create_directories(partial / "runs");
    std::ofstream(partial / "index.html") << "<html>half</html>";
  }
  const auto left = entries_named(partial, "");
  // Never a site: neither replaced as --out ...
  auto r = run_cli({"report", (work / "in").string(), "--out", partial.string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("partial"), std::string::npos) << describe(r);
  // ... nor passed over in silence by the next report into SITE, which names it and leaves it.
  r = run_cli({"report", (work / "in").string(), "--out", site.string(), "-q"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find(partial.filename().string() + " is left from a report that was stopped"), std::string::npos)
      << describe(r);
  EXPECT_EQ(entries_named(partial, ""), left);
  expect_whole_site(site);
  // Killed while it removed the site it replaced: that one is left under SITE.old.partial.<pid>,
  // and named too.
  const fs::path old = site.string() + ".old.partial." + std::to_string(dead_pid());
  fs::create_directories(old / "runs");
  r = run_cli({"report", (work / "in").string(), "--out", site.string(), "-q"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find(old.filename().string() + " is left from a report that was stopped"), std::string::npos)
      << describe(r);
  EXPECT_TRUE(fs::is_directory(old / "runs"));
}

TEST(ExportInterrupt, SignalsStopItWithEverythingItWroteRemoved) {
  const fs::path work = fresh_dir("export_interrupt");
  make_runs(work / "in", 200);
  const fs::path tb = work / "tb";
  int caught = 0;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    SCOPED_TRACE("signal " + std::to_string(sig));
    fs::remove_all(tb);
    Child c;
    c.pid = spawn({"export", "tensorboard", (work / "in").string(), "--out", tb.string(), "-q"}, work / "out.txt",
                  work / "err.txt");
    // The export has begun writing once it has made --out.
    ASSERT_TRUE(normlab::test::wait_until([&] { return fs::exists(tb) || c.poll(); }, "--out or the end"));
    if (!c.ended) ::kill(c.pid, sig);
    c.wait();
    const std::string err = slurp(work / "err.txt");
    ASSERT_TRUE(WIFEXITED(c.status)) << "killed by signal " << WTERMSIG(c.status);
    const int code = WEXITSTATUS(c.status);
    EXPECT_TRUE(code == 128 + sig || code == 0) << code << ": " << err;
    if (code == 128 + sig) {
      ++caught;
      EXPECT_EQ(split_lines(err).size(), 1u) << err;
      EXPECT_NE(err.find("interrupted by SIG"), std::string::npos) << err;
      EXPECT_FALSE(fs::exists(tb)) << "the stopped export left " << tb;
    } else {
      EXPECT_EQ(entries_named(tb, "tfevents").size(), 200u);
    }
    if (fs::exists(tb)) {
      EXPECT_TRUE(entries_named(tb, ".partial.").empty());
    }
  }
  std::printf("%d of 3 exports stopped by their signal while writing; the others had finished\n", caught);
  EXPECT_GT(caught, 0) << "no export was stopped while writing: the signal path went untested";
}

TEST(ExportInterrupt, AKilledExportsPartialFileIsNamed) {
  const fs::path work = fresh_dir("export_kill");
  make_runs(work / "in", 1);
  const fs::path tb = work / "tb";
  fs::create_directories(tb / "in" / "r000");
  const fs::path left = tb / "in" / "r000" / (".export.partial." + std::to_string(dead_pid()));
  std::ofstream(left) << "half an events file";
  auto r = run_cli({"export", "tensorboard", (work / "in").string(), "--out", tb.string(), "-q"});
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.err.find(left.filename().string() + " is left from an export that was stopped"), std::string::npos)
      << describe(r);
  EXPECT_EQ(slurp(left), "half an events file");
  EXPECT_EQ(entries_named(tb, "tfevents").size(), 1u);
}
