// `normlab sweep render`: a document's blocks are its directives' output, replaced on every render;
// everything else is kept byte for byte; malformed documents and failing commands are one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "normlab/error.h"
#include "normlab/render.h"
#include "test_util.h"

using namespace normlab;
namespace fs = std::filesystem;

namespace {

// handcalc is deterministic and fast: its output stands for any command's.
const std::string kCommand = "handcalc --x 1,2,3 --norm rmsnorm --decimals 3";

std::string handcalc_output() {
  test::CliResult r = test::run_cli({"handcalc", "--x", "1,2,3", "--norm", "rmsnorm", "--decimals", "3"});
  EXPECT_EQ(r.exit_code, 0) << test::describe(r);
  return r.out;
}

std::string doc(const std::string& block) {
  return "# Title\n\nProse before.\n\n<!-- normlab: " + kCommand + " -->\n" + block +
         "<!-- normlab: end -->\n\nProse after, kept.\n";
}

}  // namespace

TEST(Render, ABlockBecomesItsCommandsOutputAndTheRestIsKept) {
  const std::string out = handcalc_output();
  ASSERT_FALSE(out.empty());
  RenderResult r = render_document(doc("stale table\n"), "doc.md", NORMLAB_BINARY);
  EXPECT_EQ(r.text, doc(out));
  ASSERT_EQ(r.blocks.size(), 1u);
  EXPECT_EQ(r.blocks[0].line, 5u);
  EXPECT_EQ(r.blocks[0].command, kCommand);
  EXPECT_TRUE(r.blocks[0].changed);
  // Rendering the rendered document changes nothing.
  RenderResult again = render_document(r.text, "doc.md", NORMLAB_BINARY);
  EXPECT_EQ(again.text, r.text);
  EXPECT_FALSE(again.blocks[0].changed);
  // An empty block is filled.
  EXPECT_EQ(render_document(doc(""), "doc.md", NORMLAB_BINARY).text, doc(out));
}

TEST(Render, MalformedDocumentsAndFailingCommandsAreOneLine) {
  auto error_of = [](const std::string& text) {
    try {
      render_document(text, "doc.md", NORMLAB_BINARY);
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      return what;
    }
    ADD_FAILURE() << "no error for:\n" << text;
    return std::string();
  };
  EXPECT_NE(error_of("<!-- normlab: " + kCommand + " -->\nx\n").find("doc.md:1: the block of `" + kCommand + "` has no end marker"),
            std::string::npos);
  EXPECT_NE(error_of("text\n<!-- normlab: end -->\n").find("doc.md:2: an end marker without a directive"),
            std::string::npos);
  EXPECT_NE(error_of("<!-- normlab: " + kCommand + " -->\n<!-- normlab: " + kCommand + " -->\n<!-- normlab: end -->\n")
                .find("doc.md:2: a directive inside the block of line 1"),
            std::string::npos);
  EXPECT_NE(error_of("<!-- normlab:  -->\n<!-- normlab: end -->\n").find("a directive without a command"), std::string::npos);
  EXPECT_NE(error_of("<!-- normlab: handcalc --x '1,2' -->\n<!-- normlab: end -->\n").find("holds a quote"),
            std::string::npos);
  // The command's own error, quoted with where the directive is.
  const std::string failed = error_of("a\n<!-- normlab: handcalc --x 1,zz -->\n<!-- normlab: end -->\n");
  EXPECT_NE(failed.find("doc.md:2: `normlab handcalc --x 1,zz` failed (exit 2)"), std::string::npos) << failed;
  EXPECT_NE(failed.find("--x"), std::string::npos) << failed;
}

TEST(Render, TheCliRewritesInPlaceAndCheckSaysWhatIsStale) {
  const fs::path dir = test::fresh_dir("render_cli");
  fs::create_directories(dir);
  const std::string path = (dir / "doc.md").string();
  {
    std::ofstream f(path);
    f << doc("stale\n");
  }
  test::CliResult r = test::run_cli({"sweep", "render", path, "--check"});
  EXPECT_EQ(r.exit_code, 1) << test::describe(r);
  EXPECT_NE(r.err.find(path + ":5: `normlab " + kCommand + "` gives other output"), std::string::npos) << test::describe(r);
  EXPECT_EQ(test::slurp(path), doc("stale\n"));  // --check writes nothing
  r = test::run_cli({"sweep", "render", path});
  EXPECT_EQ(r.exit_code, 0) << test::describe(r);
  EXPECT_NE(r.out.find("1 blocks, 1 rewritten"), std::string::npos) << test::describe(r);
  EXPECT_EQ(test::slurp(path), doc(handcalc_output()));
  r = test::run_cli({"sweep", "render", path, "--check"});
  EXPECT_EQ(r.exit_code, 0) << test::describe(r);
  EXPECT_NE(r.out.find("1 blocks, 0 differ"), std::string::npos) << test::describe(r);
  r = test::run_cli({"sweep", "render", (dir / "missing.md").string()});
  EXPECT_EQ(r.exit_code, 2) << test::describe(r);
  EXPECT_EQ(test::split_lines(r.err).size(), 1u) << test::describe(r);
  fs::remove_all(dir);
}

// A directive that renders its own document (or any document) would start renders without end:
// the render inside a directive is refused, so the outer one fails at once, naming both.
TEST(Render, ADocumentThatRendersItselfStopsAtOnce) {
  const fs::path dir = test::fresh_dir("render_self");
  fs::create_directories(dir);
  const std::string text = "# doc\n<!-- normlab: sweep render doc.md -->\n<!-- normlab: end -->\n";
  {
    std::ofstream f(dir / "doc.md");
    f << text;
  }
  test::RunOptions o;
  o.cwd = dir.string();
  o.timeout_s = 60;
  const test::CliResult r = test::run_cli({"sweep", "render", "doc.md"}, o);
  EXPECT_FALSE(r.timed_out) << test::describe(r);
  EXPECT_EQ(r.exit_code, 2) << test::describe(r);
  ASSERT_EQ(test::split_lines(r.err).size(), 1u) << test::describe(r);
  EXPECT_NE(r.err.find("doc.md:2: `normlab sweep render doc.md` failed (exit 2)"), std::string::npos) << test::describe(r);
  EXPECT_NE(r.err.find("a document's directives may not render documents"), std::string::npos) << test::describe(r);
  EXPECT_EQ(test::slurp((dir / "doc.md").string()), text);
  fs::remove_all(dir);
}
