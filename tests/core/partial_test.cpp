// The <path>.partial.<pid> convention (normlab/io.h): one spelling for train, convert, report and
// export, and how a leftover of a process that is gone is told from one still being written.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "normlab/io.h"
#include "normlab/system.h"
#include "test_util.h"

namespace fs = std::filesystem;

TEST(Partial, NameAndSplit) {
  const std::string mine = normlab::partial_path("out/site/");
  EXPECT_EQ(mine, "out/site.partial." + std::to_string(::getpid()));
  std::string path;
  long pid = 0;
  ASSERT_TRUE(normlab::split_partial(mine, &path, &pid));
  EXPECT_EQ(path, "out/site");
  EXPECT_EQ(pid, ::getpid());
  ASSERT_TRUE(normlab::split_partial("tb/r/.export.partial.12/", &path, &pid));
  EXPECT_EQ(path, "tb/r/.export");
  EXPECT_EQ(pid, 12);
  for (const char* other : {"site", "site.partial.", "site.partial.12x", "site.partial.1234567890", ".partial.12",
                            "dir/.partial.12", "site.partial.12/index.html"})
    EXPECT_FALSE(normlab::split_partial(other, &path, &pid)) << other;
}

TEST(Partial, StaleOnesAreThoseOfProcessesThatAreGone) {
  const fs::path dir = normlab::test::fresh_dir("partials");
  fs::create_directories(dir);
  const pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  int status = 0;
  ::waitpid(gone, &status, 0);
  const std::string site = (dir / "site").string();
  fs::create_directories(normlab::partial_path(site));               // this process's: being written
  fs::create_directories(site + ".partial." + std::to_string(gone));  // a process that is gone
  fs::create_directories(site + ".partial.abc");                      // not a partial
  fs::create_directories(site + "2.partial." + std::to_string(gone)); // another path's
  EXPECT_EQ(normlab::partials_of(site).size(), 2u);
  EXPECT_EQ(normlab::stale_partials(site), std::vector<std::string>{site + ".partial." + std::to_string(gone)});
  EXPECT_TRUE(normlab::process_alive(::getpid()));
  EXPECT_FALSE(normlab::process_alive(gone));
  EXPECT_EQ(normlab::signal_name(SIGINT), "SIGINT");
  fs::remove_all(dir);
}
