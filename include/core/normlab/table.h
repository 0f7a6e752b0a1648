// Tables of strings, rendered as aligned text, markdown or CSV: the one renderer behind every
// table normlab prints or writes (bench, sweep, probe, gradcheck, train). Libraries build a Table
// and render it to a string; the CLI prints the string.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "normlab/names.h"

namespace normlab {

// How a command writes its results: a text table for a person, markdown, CSV, or JSON. A Table
// renders the first three; each command's JSON document is its own.
enum class OutputFormat { text, markdown, csv, json };
template <>
const EnumNames& enum_names<OutputFormat>();

enum class Align { left, right };

struct TableColumn {
  std::string header;
  Align align = Align::left;  // markdown: ---: for right
  size_t min_width = 0;       // text: at least this many characters, as printf's %8s
  std::string gap = "  ";     // text: what stands between this column and the one before it
};

struct Table {
  std::vector<TableColumn> columns;

  // A row of cells, one per column; a shorter row leaves its last columns empty.
  void add_row(std::vector<std::string> cells);
  // Text only: a line of its own at this place between the rows ("" is a blank line), such as
  // a note on the row above or a blank line between groups; markdown and CSV leave it out.
  void add_line(std::string line);

  // Text: every column as wide as its widest cell (header included) and at least min_width,
  // padded on the side away from its alignment, trailing spaces dropped. Widths count UTF-8
  // characters, not bytes.
  std::string text() const;
  // "| a | b |" lines under the header and its ---/---: line.
  std::string markdown() const;
  // The header, then one line per row; fields quoted as csv_field quotes them.
  std::string csv() const;
  // text, markdown or csv; json is a misuse (NL_CHECK).
  std::string render(OutputFormat f) const;

  // One line of a table printed as it grows (train's loss table, row by row): each cell padded
  // to its column's min_width only, so every line lines up while the widths are wide enough.
  std::string text_line(const std::vector<std::string>& cells) const;
  std::string text_header() const;

 private:
  struct Row {
    std::vector<std::string> cells;
    bool is_line = false;  // add_line's: cells[0] is the whole line
  };
  std::vector<Row> rows_;
  std::string line_of(const std::vector<std::string>& cells, const std::vector<size_t>& widths) const;
};

// A CSV field (RFC 4180): as is, or in double quotes (inner quotes doubled) when it holds a
// comma, a quote or a line break.
std::string csv_field(const std::string& s);
// Text for XML or HTML (an SVG label, a page of the report): & < > " ' as entities.
std::string xml_escaped(const std::string& s);

}  // namespace normlab
