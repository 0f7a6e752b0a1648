// The --help of every command and subcommand: each repository path it names (a config to copy,
// a document to read, a result to plot) exists in the source tree, so that an example a user
// pastes from the help does not fail on a file that was renamed or never committed.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

using namespace normlab::test;
namespace fs = std::filesystem;

namespace {

// The names CLI11 lists under "Subcommands:", one per indented line, up to the blank line.
std::vector<std::string> subcommands_in(const std::string& help) {
  std::vector<std::string> names;
  bool in = false;
  for (const std::string& line : split_lines(help)) {
    if (line == "Subcommands:") {
      in = true;
      continue;
    }
    if (!in) continue;
    if (line.size() < 3 || line.compare(0, 2, "  ") != 0 || line[2] == ' ') break;
    names.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  return names;
}

// The help of `path` (empty: normlab itself) and of every subcommand below it, depth first.
void collect_helps(const std::vector<std::string>& path, std::vector<std::pair<std::string, std::string>>& out) {
  std::vector<std::string> args = path;
  args.push_back("--help");
  const CliResult r = run_cli(args);
  std::string name = "normlab";
  for (const std::string& p : path) name += " " + p;
  EXPECT_EQ(r.exit_code, 0) << describe(r);
  out.emplace_back(name, r.out);
  for (const std::string& sub : subcommands_in(r.out)) {
    std::vector<std::string> deeper = path;
    deeper.push_back(sub);
    collect_helps(deeper, out);
  }
}

// Top-level folders of the repository: a word starting with one of them names a file in it.
const std::vector<std::string> kRepoDirs = {"experiments/", "results/", "docs/", "scripts/",
                                            "tests/",       "src/",     "include/", "cmake/"};

// Every word of `text` that names a path in the repository, trimmed of the punctuation around it
// in a sentence (quotes, brackets, a full stop) and of an option's or a data spec's prefix
// (`--config=`, `text:`). Words with a placeholder (<name>, *, {a,b}) are patterns, not paths.
std::vector<std::string> repo_paths_in(const std::string& text) {
  std::vector<std::string> paths;
  std::string word;
  auto flush = [&] {
    std::string w = word;
    word.clear();
    while (!w.empty() && std::string("\"'`([").find(w.front()) != std::string::npos) w.erase(0, 1);
    while (!w.empty() && std::string("\"'`)],;:.").find(w.back()) != std::string::npos) w.pop_back();
    if (w.compare(0, 2, "--") == 0 && w.find('=') != std::string::npos) w = w.substr(w.find('=') + 1);
    if (const size_t colon = w.find(':'); colon != std::string::npos) w = w.substr(colon + 1);
    if (w.find_first_of("<>*{}$") != std::string::npos) return;
    for (const std::string& dir : kRepoDirs)
      if (w.compare(0, dir.size(), dir) == 0) {
        paths.push_back(w);
        return;
      }
  };
  for (char c : text) {
    if (c == ' ' || c == '\n' || c == '\t') flush();
    else word += c;
  }
  flush();
  return paths;
}

TEST(HelpExamples, EveryRepositoryPathTheHelpNamesExists) {
  std::vector<std::pair<std::string, std::string>> helps;
  collect_helps({}, helps);
  // The walk reached the commands and their subcommands (a help that no longer lists them would
  // leave nothing to check).
  std::set<std::string> seen;
  for (const auto& h : helps) seen.insert(h.first);
  for (const char* c : {"normlab train", "normlab sweep", "normlab sweep render", "normlab bench norms",
                        "normlab handcalc placement", "normlab export tensorboard", "normlab plot heatmap", "normlab probe"})
    EXPECT_TRUE(seen.count(c)) << c << " was not reached from normlab --help";
  size_t checked = 0;
  for (const auto& [command, help] : helps)
    for (const std::string& p : repo_paths_in(help)) {
      EXPECT_TRUE(fs::exists(fs::path(NORMLAB_SOURCE_DIR) / p)) << command << " --help names " << p << ", which is not in the repository";
      ++checked;
    }
  // The helps do name repository files (configs, docs, results): a tokenizer that finds none checks nothing.
  EXPECT_GE(checked, 10u);
}

// The word splitting above, on the shapes of words the helps use.
TEST(HelpExamples, RepositoryPathsAreFoundInTheirSentences) {
  EXPECT_EQ(repo_paths_in("see docs/sweep.md. Or (docs/bench.md), `scripts/x.py`; --config=experiments/a.json"),
            (std::vector<std::string>{"docs/sweep.md", "docs/bench.md", "scripts/x.py", "experiments/a.json"}));
  EXPECT_EQ(repo_paths_in("--data text:experiments/data/tiny.txt --out runs/x probe.json results/<name>/x.md"),
            (std::vector<std::string>{"experiments/data/tiny.txt"}));
}

}  // namespace
