// Documents regenerated from the data (render.h): directives run as child processes of this same
// binary, so a document can cite any command's output exactly as a user would see it.
#include "normlab/render.h"

#include <fmt/core.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/system.h"

namespace normlab {

namespace {

constexpr const char* kOpen = "<!-- normlab:";
constexpr const char* kClose = "-->";
constexpr const char* kEnd = "<!-- normlab: end -->";
// Set in a directive's process: the document and line that runs it.
constexpr const char* kRenderingVariable = "NORMLAB_RENDERING";

// The command of a directive line, or "" when the line is not one.
bool directive_of(const std::string& line, std::string* command) {
  const size_t start = line.find_first_not_of(" \t");
  if (start == std::string::npos || line.compare(start, std::string(kOpen).size(), kOpen) != 0) return false;
  std::string rest = line.substr(start + std::string(kOpen).size());
  const size_t end = rest.rfind(kClose);
  if (end == std::string::npos) return false;
  rest = rest.substr(0, end);
  const size_t a = rest.find_first_not_of(" \t"), b = rest.find_last_not_of(" \t");
  *command = a == std::string::npos ? "" : rest.substr(a, b - a + 1);
  return true;
}

// A temporary file this process creates and removes.
struct TempFile {
  std::string path;
  TempFile() {
    std::string pattern = (std::filesystem::temp_directory_path() / "normlab-render-XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    NL_CHECK(fd >= 0, "cannot create a temporary file for a rendered block");
    ::close(fd);
    path = pattern;
  }
  ~TempFile() { ::unlink(path.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};

std::string last_line(const std::string& text) {
  std::string t = text;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  const size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

}  // namespace

std::vector<std::string> directive_words(const std::string& command, const std::string& where) {
  std::vector<std::string> words;
  std::istringstream in(command);
  std::string w;
  while (in >> w) {
    NL_USAGE(w.find_first_of("\"'\\`$") == std::string::npos,
             "{}: directive word '{}' holds a quote, backslash, backtick or $ (directives are split at spaces only)",
             where, shown(w));
    words.push_back(w);
  }
  NL_USAGE(!words.empty(), "{}: a directive without a command", where);
  return words;
}

RenderResult render_document(const std::string& text, const std::string& source, const std::string& exe) {
  // A directive that renders a document (itself, or one that renders this one) would start
  // renders without end, each waiting on the next: a render runs its directives only at the top.
  if (const char* outer = std::getenv(kRenderingVariable); outer != nullptr && *outer != '\0')
    throw UsageError(fmt::format("'{}' is rendered by a directive of '{}': a document's directives may not render documents",
                                 source, shown(outer, 200)));
  RenderResult result;
  std::istringstream in(text);
  std::string line;
  size_t number = 0;
  bool open = false;
  RenderBlock block;
  std::string old_output, new_output;
  while (std::getline(in, line)) {
    ++number;
    std::string command;
    const bool is_directive = directive_of(line, &command);
    const bool is_end = is_directive && command == "end";
    if (is_end) {
      NL_USAGE(open, "{}:{}: an end marker without a directive before it", source, number);
      block.changed = old_output != new_output;
      result.blocks.push_back(block);
      result.text += new_output + line + "\n";
      open = false;
      continue;
    }
    if (is_directive) {
      NL_USAGE(!open, "{}:{}: a directive inside the block of line {} (its end marker '{}' is missing)", source, number,
               block.line, kEnd);
      const std::string where = fmt::format("{}:{}", source, number);
      std::vector<std::string> argv = {exe};
      for (std::string& w : directive_words(command, where)) argv.push_back(std::move(w));
      TempFile out, err;
      ChildSpec spec;
      spec.argv = argv;
      spec.stdout_path = out.path;
      spec.stderr_path = err.path;
      spec.env = {{kRenderingVariable, where}};
      const int code = run_child(spec);
      NL_USAGE(code == 0, "{}: `normlab {}` failed (exit {}): {}", where, shown(command, 120), code,
               shown(last_line(read_file(err.path)), 300));
      new_output = read_file(out.path);
      if (!new_output.empty() && new_output.back() != '\n') new_output += '\n';
      old_output.clear();
      block = RenderBlock{number, command, false};
      open = true;
      result.text += line + "\n";
      continue;
    }
    if (open) old_output += line + "\n";
    else result.text += line + "\n";
  }
  NL_USAGE(!open, "{}:{}: the block of `{}` has no end marker '{}'", source, block.line, block.command, kEnd);
  return result;
}

}  // namespace normlab
