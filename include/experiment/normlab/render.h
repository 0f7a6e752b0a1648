// Documents whose tables are regenerated from the data: `normlab sweep render DOC.md`.
//
// A directive line names a normlab command; the lines up to its end marker are that command's
// standard output, replaced on every render:
//
//   <!-- normlab: sweep summarize results/sweeps/depth-torch --no-write --brief -->
//   ...the command's output...
//   <!-- normlab: end -->
//
// So a rerun of the sweeps and one render rewrite every number a document cites, and a check
// (--check) says whether the committed document still is what the data give.
#pragma once
#include <string>
#include <vector>

namespace normlab {

struct RenderBlock {
  size_t line = 0;          // 1-based line of the directive
  std::string command;      // the directive's command line, as written
  bool changed = false;     // its output differs from what the document held
};

struct RenderResult {
  std::string text;                 // the document with every block's output replaced
  std::vector<RenderBlock> blocks;  // in document order
};

// Splits a directive's command line at spaces and tabs (no quoting: a word with a quote character
// or a backslash is refused, as is an empty command). UsageError naming `where`.
std::vector<std::string> directive_words(const std::string& command, const std::string& where);

// Renders `text` (read from `source`, named in errors): each directive's command runs as
// `exe COMMAND...` in the current directory, its stdout replacing the block. A directive without
// an end marker, an end marker without a directive, nested directives and a command that exits
// non-zero (its stderr's last line is quoted) are one-line UsageErrors; nothing is written by this
// call. The directives' processes are marked (NORMLAB_RENDERING): a render inside one is refused, so
// a document that renders itself stops at once instead of recursing.
RenderResult render_document(const std::string& text, const std::string& source, const std::string& exe);

}  // namespace normlab
