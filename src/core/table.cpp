#include "normlab/table.h"

#include <algorithm>

#include "normlab/error.h"

namespace normlab {

template <>
const EnumNames& enum_names<OutputFormat>() {
  static const EnumNames t{"format",
                           {{OutputFormat::text, "text", {"table"}, "aligned columns for a person"},
                            {OutputFormat::markdown, "markdown", {"md"}, "a markdown table"},
                            {OutputFormat::csv, "csv", {}, "comma-separated values, one line per row"},
                            {OutputFormat::json, "json", {}, "a JSON document"}}};
  return t;
}

namespace {

// Characters on a terminal, near enough: UTF-8 lead bytes ("±" and "…" are one each).
size_t display_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

std::vector<std::string> headers_of(const std::vector<TableColumn>& columns) {
  std::vector<std::string> h;
  for (const TableColumn& c : columns) h.push_back(c.header);
  return h;
}

}  // namespace

void Table::add_row(std::vector<std::string> cells) {
  NL_CHECK(cells.size() <= columns.size(), "table row of {} cells for {} columns", cells.size(), columns.size());
  rows_.push_back({std::move(cells), false});
}

void Table::add_line(std::string line) { rows_.push_back({{std::move(line)}, true}); }

std::string Table::line_of(const std::vector<std::string>& cells, const std::vector<size_t>& widths) const {
  std::string s;
  for (size_t c = 0; c < cells.size(); ++c) {
    const size_t w = display_width(cells[c]);
    const std::string pad(std::max(widths[c], w) - w, ' ');
    if (c) s += columns[c].gap;
    s += columns[c].align == Align::right ? pad + cells[c] : cells[c] + pad;
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s + "\n";
}

std::string Table::text() const {
  std::vector<size_t> widths;
  for (const TableColumn& c : columns) widths.push_back(std::max(c.min_width, display_width(c.header)));
  for (const Row& r : rows_)
    if (!r.is_line)
      for (size_t c = 0; c < r.cells.size(); ++c) widths[c] = std::max(widths[c], display_width(r.cells[c]));
  std::string out = line_of(headers_of(columns), widths);
  for (const Row& r : rows_) out += r.is_line ? r.cells[0] + "\n" : line_of(r.cells, widths);
  return out;
}

std::string Table::text_line(const std::vector<std::string>& cells) const {
  NL_CHECK(cells.size() <= columns.size(), "table row of {} cells for {} columns", cells.size(), columns.size());
  std::vector<size_t> widths;
  for (const TableColumn& c : columns) widths.push_back(c.min_width);
  return line_of(cells, widths);
}

std::string Table::text_header() const { return text_line(headers_of(columns)); }

std::string Table::markdown() const {
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s = "|";
    for (size_t c = 0; c < columns.size(); ++c) s += " " + (c < cells.size() ? cells[c] : std::string()) + " |";
    return s + "\n";
  };
  std::string out = line(headers_of(columns)) + "|";
  for (const TableColumn& c : columns) out += c.align == Align::right ? "---:|" : "---|";
  out += "\n";
  for (const Row& r : rows_)
    if (!r.is_line) out += line(r.cells);
  return out;
}

std::string Table::csv() const {
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < columns.size(); ++c) s += (c ? "," : "") + csv_field(c < cells.size() ? cells[c] : "");
    return s + "\n";
  };
  std::string out = line(headers_of(columns));
  for (const Row& r : rows_)
    if (!r.is_line) out += line(r.cells);
  return out;
}

std::string Table::render(OutputFormat f) const {
  switch (f) {
    case OutputFormat::text: return text();
    case OutputFormat::markdown: return markdown();
    case OutputFormat::csv: return csv();
    case OutputFormat::json: break;
  }
  NL_CHECK(false, "a table renders as text, markdown or csv, not {}", to_string(f));
  return "";
}

std::string xml_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '"') out += "&quot;";
    else if (c == '\'') out += "&#39;";
    else out += c;
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace normlab
