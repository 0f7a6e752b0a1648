// `normlab report`: the site's structure (every link and image resolves inside the site, every
// table has rows, a page per sweep, point and run, the experiments page linking claims to sweeps),
// re-running replaces the site, and a person's directory is never replaced.
// scripts/report_check.sh loads the same kind of site in a real browser (CI).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::describe;
using normlab::test::fresh_dir;
using normlab::test::run_cli;
using normlab::test::slurp;

namespace {

std::string percent_decoded(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct SiteCheck {
  size_t pages = 0, links = 0, tables = 0;
  std::vector<std::string> problems;
};

// Every href and src of every page names a file of the site; every table has body rows.
SiteCheck check_site(const fs::path& site) {
  SiteCheck c;
  for (const auto& e : fs::recursive_directory_iterator(site)) {
    if (e.path().extension() != ".html") continue;
    ++c.pages;
    const std::string html = slurp(e.path());
    // Every href="..." and src="..." (no std::regex: GCC 12 warns inside it under the sanitizers).
    std::vector<std::string> targets;
    for (const char* name : {" href=\"", " src=\""})
      for (size_t at = html.find(name); at != std::string::npos; at = html.find(name, at + 1)) {
        const size_t begin = at + std::string(name).size(), end = html.find('"', begin);
        if (end != std::string::npos) targets.push_back(html.substr(begin, end - begin));
      }
    for (std::string target : targets) {
      if (target.find("://") != std::string::npos || target.rfind("//", 0) == 0) {
        c.problems.push_back(e.path().string() + ": leaves the site: " + target);
        continue;
      }
      target = percent_decoded(target.substr(0, target.find('#')));
      if (target.empty()) continue;
      ++c.links;
      if (!fs::exists(e.path().parent_path() / target)) c.problems.push_back(e.path().string() + ": broken: " + target);
    }
    for (size_t at = html.find("<table"); at != std::string::npos; at = html.find("<table", at + 1)) {
      ++c.tables;
      const size_t body = html.find("<tbody>", at), end = html.find("</table>", at);
      if (body == std::string::npos || end == std::string::npos || html.find("<tr>", body) > end)
        c.problems.push_back(e.path().string() + ": a table without rows");
    }
  }
  return c;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(ReportCli, WritesASiteWhoseEveryLinkResolves) {
  const fs::path work = fresh_dir("report_site");
  fs::create_directories(work / "in");
  auto r = run_cli({"sweep", "--out", (work / "in" / "grid").string(), "--jobs", "2", "-q", "steps=4", "eval_every=2",
                    "batch_size=4", "layers=1,2", "placement=pre,post"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  r = run_cli({"train", "--steps", "4", "--eval_every", "2", "--layers", "1", "--batch_size", "4", "--out",
               (work / "in" / "one run").string(), "-q"});  // a space in a name: links must encode it
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::ofstream(work / "in" / "REPRODUCTION.md") << "# R\n\n## What holds\n\n<!-- verdicts: claim | verdict | section -->\n| the claim | what we found | where |\n|---|---|---|\n"
                                                    "| depth `matters` | **reproduced** | [Depth](#depth-and-placement) |\n<!-- end of verdicts -->\n\n"
                                                    "## Depth and placement\n\nSee results/sweeps/grid and results/sweeps/elsewhere.\n";
  const fs::path site = work / "site";
  r = run_cli({"report", (work / "in").string(), "--out", site.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const SiteCheck c = check_site(site);
  EXPECT_TRUE(c.problems.empty()) << c.problems.size() << " problems, first: " << c.problems[0];
  EXPECT_EQ(c.pages, 1u + 1u + 1u + 4u + 1u);  // index, experiments, the sweep, its 4 points, the run
  EXPECT_GT(c.links, 20u);
  const std::string index = slurp(site / "index.html");
  EXPECT_NE(index.find("sweeps/grid/index.html"), std::string::npos);
  EXPECT_NE(index.find("one%20run/index.html"), std::string::npos);
  const std::string sweep = slurp(site / "sweeps" / "grid" / "index.html");
  EXPECT_EQ(count(sweep, "../../runs/grid/layers="), 4u);  // a link to every point
  EXPECT_EQ(count(sweep, "<img src="), 4u);  // loss curves, final vs rows, two small multiples
  EXPECT_EQ(count(slurp(site / "runs" / "grid" / "layers=2" / "placement=post" / "index.html"), "<img src="), 5u);  // loss, heatmap + profile x 2 fields
  EXPECT_NE(slurp(site / "style.css").find("table"), std::string::npos);
  const std::string exp = slurp(site / "experiments.html");
  EXPECT_NE(exp.find("href=\"sweeps/grid/index.html\""), std::string::npos);
  EXPECT_NE(exp.find("elsewhere (not in this report)"), std::string::npos);
  EXPECT_NE(exp.find("<code>matters</code>"), std::string::npos);
  // No file from the network, nothing half-written beside it.
  EXPECT_EQ(slurp(site / "index.html").find("http"), std::string::npos);
  // Again: the site is replaced, nothing left over.
  fs::remove_all(work / "in" / "one run");
  r = run_cli({"report", (work / "in").string(), "--out", site.string() + "/", "-q"});  // "site/" is "site"
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_FALSE(fs::exists(site / "runs" / "standalone"));
  for (const auto& e : fs::directory_iterator(work)) EXPECT_EQ(e.path().string().find(".partial."), std::string::npos) << e.path();
  for (const auto& e : fs::directory_iterator(work)) EXPECT_EQ(e.path().string().find(".old."), std::string::npos) << e.path();
  EXPECT_TRUE(check_site(site).problems.empty());
}

TEST(ReportCli, NeverReplacesAPersonsDirectory) {
  const fs::path work = fresh_dir("report_mine");
  fs::create_directories(work / "mine");
  std::ofstream(work / "mine" / "notes.txt") << "mine\n";
  auto r = run_cli({"train", "--steps", "2", "--eval_every", "1", "--layers", "1", "--batch_size", "2", "--out",
                    (work / "run").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  r = run_cli({"report", (work / "run").string(), "--out", (work / "mine").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("not a site"), std::string::npos) << describe(r);
  EXPECT_EQ(slurp(work / "mine" / "notes.txt"), "mine\n");
}

// A site is replaced only as normlab wrote it: a file a person added to it or changed in
// it, an empty or forged marker, a site of an earlier normlab whose marker lists nothing: refused
// with one line naming the reason, exit 2, nothing changed.
TEST(ReportCli, ReplacesOnlyASiteAsItWroteIt) {
  const fs::path work = fresh_dir("report_replace");
  fs::create_directories(work);
  auto r = run_cli({"train", "--steps", "2", "--eval_every", "1", "--layers", "1", "--batch_size", "2", "--out",
                    (work / "run").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const fs::path site = work / "site";
  const std::vector<std::string> report = {"report", (work / "run").string(), "--out", site.string(), "-q"};
  ASSERT_EQ((r = run_cli(report)).exit_code, 0) << describe(r);
  // The marker lists every other file of the site with its size and digest.
  const auto marker = nlohmann::json::parse(slurp(site / ".normlab-report"));
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(site))
    if (e.is_regular_file() && e.path().filename() != ".normlab-report") {
      const std::string rel = e.path().lexically_relative(site).string();
      ASSERT_TRUE(marker["files"].contains(rel)) << rel;
      EXPECT_EQ(marker["files"][rel]["bytes"], fs::file_size(e.path())) << rel;
      EXPECT_TRUE(normlab::test::is_sha256_hex(marker["files"][rel]["sha256"])) << rel;
      ++files;
    }
  EXPECT_EQ(marker["files"].size(), files);
  ASSERT_EQ((r = run_cli(report)).exit_code, 0) << describe(r);  // as written: replaced

  // A person's file in the site: refused, named, nothing changed.
  std::ofstream(site / "notes.txt") << "mine\n";
  const std::string index = slurp(site / "index.html");
  r = run_cli(report);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("'notes.txt', which `normlab report` did not write"), std::string::npos) << describe(r);
  EXPECT_EQ(normlab::test::split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_EQ(slurp(site / "notes.txt"), "mine\n");
  EXPECT_EQ(slurp(site / "index.html"), index);
  fs::remove(site / "notes.txt");
  // ... in a folder of the site, or a folder of one's own.
  fs::create_directories(site / "runs" / "mine");
  r = run_cli(report);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("'runs/mine'"), std::string::npos) << describe(r);
  EXPECT_TRUE(fs::is_directory(site / "runs" / "mine"));
  fs::remove(site / "runs" / "mine");
  // A file of the site changed by hand.
  std::ofstream(site / "style.css", std::ios::app) << "/* my edit */\n";
  r = run_cli(report);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("'style.css', which was changed"), std::string::npos) << describe(r);
  EXPECT_NE(slurp(site / "style.css").find("my edit"), std::string::npos);
  // Removing a file of the site loses nothing: the site is still replaced.
  fs::remove(site / "style.css");
  ASSERT_EQ((r = run_cli(report)).exit_code, 0) << describe(r);
  EXPECT_TRUE(fs::is_regular_file(site / "style.css"));
  for (const auto& e : fs::directory_iterator(work)) EXPECT_EQ(e.path().string().find(".partial."), std::string::npos) << e.path();
}

TEST(ReportCli, AnEmptyOrForgedMarkerMakesNoSite) {
  const fs::path work = fresh_dir("report_marker");
  fs::create_directories(work / "mine");
  auto r = run_cli({"train", "--steps", "2", "--eval_every", "1", "--layers", "1", "--batch_size", "2", "--out",
                    (work / "run").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::ofstream(work / "mine" / "a.txt") << "x\n";
  for (const std::string& marker :
       {std::string(""), std::string("a site written by `normlab report`; `normlab report --out` replaces only directories holding this file\n"),
        std::string("{\"written_by\": \"normlab report\", \"files\": {\"a.txt\": {\"bytes\": 2}}}\n"),
        std::string("{\"written_by\": \"normlab report\", \"files\": {\"../a.txt\": {\"bytes\": 2, \"sha256\": \"") +
            std::string(64, '0') + "\"}}}\n"}) {
    std::ofstream(work / "mine" / ".normlab-report") << marker;
    r = run_cli({"report", (work / "run").string(), "--out", (work / "mine").string()});
    EXPECT_EQ(r.exit_code, 2) << marker << describe(r);
    EXPECT_NE(r.err.find("--out"), std::string::npos) << describe(r);
    EXPECT_EQ(slurp(work / "mine" / "a.txt"), "x\n");
    EXPECT_EQ(slurp(work / "mine" / ".normlab-report"), marker);
  }
  // A marker that lists a.txt as it is still does not make index.html (not listed) normlab's: the
  // listing proves only the files it names.
  std::ofstream(work / "mine" / "index.html") << "my page\n";
  std::ofstream(work / "mine" / ".normlab-report")
      << nlohmann::json{{"written_by", "normlab report"},
                        {"files", {{"a.txt", {{"bytes", 2}, {"sha256", "73cb3858a687a8494ca3323053016282f3dad39d42cf62ca4e79dda2aac7d9ac"}}}}}}
             .dump();
  r = run_cli({"report", (work / "run").string(), "--out", (work / "mine").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("'index.html', which `normlab report` did not write"), std::string::npos) << describe(r);
  EXPECT_EQ(slurp(work / "mine" / "index.html"), "my page\n");
}

// `plot` and `probe --plot` write marked SVG files and replace only those.
TEST(PlotCli, WritesAndReplacesItsOwnSvgFiles) {
  const fs::path work = fresh_dir("plot_cli");
  fs::create_directories(work);
  auto r = run_cli({"train", "--steps", "4", "--eval_every", "2", "--layers", "3", "--batch_size", "4", "--out",
                    (work / "run").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* kind : {"heatmap", "profile"})
    for (int again = 0; again < 2; ++again) {
      r = run_cli({"plot", kind, (work / "run").string(), "--field", "block_grad_norm", "--out", (work / "p.svg").string()});
      ASSERT_EQ(r.exit_code, 0) << describe(r);
      const std::string svg = slurp(work / "p.svg");
      EXPECT_EQ(svg.rfind("<!-- normlab: plot -->\n", 0), 0u);
      EXPECT_NE(svg.find("<svg"), std::string::npos);
      EXPECT_NE(svg.find("</svg>"), std::string::npos);
    }
  // The profile against the run's config probed at initialization.
  r = run_cli({"plot", "profile", (work / "run").string(), "--init", "--out", (work / "p.svg").string()});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(slurp(work / "p.svg").find("init (probe: seed 0"), std::string::npos);
  r = run_cli({"plot", "profile", (work / "run").string(), "--init", "--field", "stream_max_abs", "--out", (work / "p.svg").string()});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  r = run_cli({"probe", "--layers", "3", "--seeds", "1", "--batch", "2", "--plot", (work / "p.svg").string(), "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(slurp(work / "p.svg").find("identity share"), std::string::npos);
}
