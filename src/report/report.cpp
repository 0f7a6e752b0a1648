// `normlab report`: sweeps and runs as one static site (normlab/report.h). Everything is read and
// rendered into memory first; the files are then written under OUT.partial.<pid>, the marker
// last, which takes OUT's place at the end (site_dir.h: the marker, the check, the replace).
#include "normlab/report.h"
#include "normlab/run_records.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "normlab/error.h"
#include "normlab/io.h"
#include "normlab/plots.h"
#include "normlab/run.h"
#include "normlab/sweep.h"
#include "normlab/system.h"
#include "normlab/table.h"
#include "site_dir.h"

namespace normlab {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// ---- HTML --------------------------------------------------------------------------------------

std::string esc(const std::string& s) { return xml_escaped(s); }

// A relative URL of a site path: every byte outside the unreserved set (and '/', and a point
// name's '=' and ',', which a path may hold as they are) percent-encoded, so that a person's space,
// '#' or '?' reach the file they name.
std::string url(const std::string& path) {
  return site_dir::percent_encoded(path, [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/' || c == '=' || c == ',';
  });
}

std::string link(const std::string& href, const std::string& text) {
  return fmt::format("<a href=\"{}\">{}</a>", esc(url(href)), esc(text));
}

// "../" once per directory level of a page below OUT.
std::string up(const std::string& page) {
  std::string out;
  for (char c : page)
    if (c == '/') out += "../";
  return out;
}

std::string page_html(const std::string& page, const std::string& title, const std::string& body) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{0}</title>\n"
      "<link rel=\"stylesheet\" href=\"{1}style.css\">\n</head>\n<body>\n"
      "<nav><a href=\"{1}index.html\">normlab report</a></nav>\n<h1>{0}</h1>\n{2}"
      "<script src=\"{1}sort.js\"></script>\n</body>\n</html>\n",
      esc(title), up(page), body);
}

struct Cell {
  std::string html;
  std::string sort;      // the value the column sorts by ("" : the text)
  bool numeric = false;  // right-aligned, tabular figures
};

// A table sortable by any column (sort.js): numbers as numbers.
std::string table_html(const std::vector<std::string>& head, const std::vector<std::vector<Cell>>& rows) {
  std::string s = "<table class=\"sortable\">\n<thead><tr>";
  for (const std::string& h : head) s += "<th title=\"sort\">" + esc(h) + "</th>";
  s += "</tr></thead>\n<tbody>\n";
  for (const auto& row : rows) {
    s += "<tr>";
    for (const Cell& c : row)
      s += fmt::format("<td{}{}>{}</td>", c.numeric ? " class=\"num\"" : "", c.sort.empty() ? "" : " data-v=\"" + esc(c.sort) + "\"", c.html);
    s += "</tr>\n";
  }
  return s + "</tbody>\n</table>\n";
}

Cell text(const std::string& t) { return {esc(t), ""}; }
Cell number(double v, int digits = 4) {
  if (!std::isfinite(v)) return {"&mdash;", "", true};
  return {fmt::format("{:.{}f}", v, digits), fmt::format("{:.17g}", v), true};
}
Cell integer(int64_t v) { return v < 0 ? Cell{"&mdash;", "", true} : Cell{std::to_string(v), std::to_string(v), true}; }

const char* kStyle = R"(body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; margin: 1.5em auto; max-width: 78em; padding: 0 1em; color: #222; }
nav { font-size: 0.9em; margin-bottom: 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.88em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.55em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; cursor: pointer; user-select: none; }
th[data-dir="asc"]::after { content: " \25B2"; } th[data-dir="desc"]::after { content: " \25BC"; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok, .completed { color: #1a6e1a; } .collapsed { color: #8a5a00; font-weight: bold; } .diverged, .failed, .damaged { color: #b00; font-weight: bold; } .pending { color: #777; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
.wide { overflow-x: auto; }
code { background: #f4f4f4; padding: 0 0.2em; }
)";

// Clicking a header sorts the table by that column; again, the other way.
const char* kSortJs = R"(document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, column) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0], ascending = th.dataset.dir !== "asc";
      table.querySelectorAll("th").forEach(function (h) { delete h.dataset.dir; });
      th.dataset.dir = ascending ? "asc" : "desc";
      var key = function (row) {
        var cell = row.cells[column], v = cell.dataset.v === undefined ? cell.textContent : cell.dataset.v;
        var n = parseFloat(v);
        return isNaN(n) ? v : n;
      };
      Array.from(body.rows).sort(function (a, b) {
        var x = key(a), y = key(b), c;
        if (typeof x === typeof y) c = x < y ? -1 : x > y ? 1 : 0; else c = typeof x === "number" ? -1 : 1;
        return ascending ? c : -c;
      }).forEach(function (row) { body.appendChild(row); });
    });
  });
});
)";

std::string status_html(const std::string& status, const std::string& detail = "") {
  return fmt::format("<span class=\"{}\">{}</span>", esc(status), esc(detail.empty() ? status : detail));
}

// ---- what is reported --------------------------------------------------------------------------

struct RunInfo {
  std::string dir;    // on disk
  std::string name;   // its page: runs/<name>/index.html
  json result, config;
  std::vector<json> metrics;
};

struct PointInfo {
  std::string name;
  std::vector<std::pair<std::string, std::string>> values;
  std::string status;   // pending, completed/ok, collapsed, diverged, failed, ...
  const RunInfo* run = nullptr;
};

struct SweepInfo {
  std::string dir, name;
  SweepSummary summary;
  std::vector<std::string> axes;
  std::vector<PointInfo> points;
};

bool is_sweep_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p / "spec.json", ec) && fs::is_directory(p / "runs", ec);
}

RunInfo read_run_info(const std::string& dir, const std::string& name) {
  const RunDir run(dir);
  RunInfo r;
  r.dir = dir;
  r.name = name;
  r.result = run.result();
  r.config = r.result.contains("config") && r.result["config"].is_object() ? r.result["config"] : json::object();
  for (MetricsRecord& m : run.metrics()) r.metrics.push_back(std::move(m.fields));
  return r;
}

// The last component of `path` ("root" for /, which has none): the name a folder's runs are
// reported under.
std::string base_name(const std::string& path) {
  fs::path p = fs::absolute(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() ? "root" : name;
}

double num(const json& j, const char* key) {
  const auto v = j.find(key);
  return v != j.end() && v->is_number() ? v->get<double>() : NAN;
}
int64_t inum(const json& j, const char* key) {
  const auto v = j.find(key);
  return v != j.end() && v->is_number_integer() ? v->get<int64_t>() : -1;
}
std::string str(const json& j, const char* key) {
  const auto v = j.find(key);
  return v != j.end() && v->is_string() ? v->get<std::string>() : "";
}

// ---- pages -------------------------------------------------------------------------------------

struct Site {
  std::map<std::string, std::string> files;  // path below OUT -> content
  size_t pages = 0;
  void page(const std::string& path, const std::string& title, const std::string& body) {
    files[path] = page_html(path, title, body);
    ++pages;
  }
};

// A run's validation loss by step, drawn by the sweep plots (a run is a sweep of one point).
std::string run_loss_svg(const RunInfo& r) {
  SweepSummary s;
  s.metric = "val_loss";
  s.col_labels = {"all"};
  s.row_values = {"validation loss"};
  s.unigram_loss = num(r.result, "unigram_loss");
  SummaryCurve c;
  c.label = "validation loss";
  for (const json& m : r.metrics) {
    if (inum(m, "step") < 0) continue;
    c.steps.push_back(inum(m, "step"));
    c.mean.push_back(num(m, "val_loss"));
  }
  c.diverged_step = inum(r.result, "diverged_step");
  s.curves.push_back(c);
  return plot_loss_curves_svg(s);
}

std::string run_status_text(const RunInfo& r) {
  const std::string status = str(r.result, "status");
  if (status == "diverged") return fmt::format("diverged at step {} ({})", inum(r.result, "diverged_step"), str(r.result, "diverged_reason"));
  if (status == "collapsed") return fmt::format("collapsed from step {}", inum(r.result, "collapsed_step"));
  return status.empty() ? "unknown" : status;
}

void run_page(Site& site, const RunInfo& r, const std::string& sweep) {
  const std::string dir = "runs/" + r.name + "/";
  const std::string sweep_link = sweep.empty() ? "" : link(up(dir + "index.html") + "sweeps/" + sweep + "/index.html", sweep);
  std::string b;
  b += fmt::format("<p>Status: {} &middot; run directory <code>{}</code>{}</p>\n", status_html(str(r.result, "status"), run_status_text(r)),
                   esc(r.dir), sweep_link.empty() ? "" : " &middot; point of sweep " + sweep_link);
  b += "<h2>Result</h2>\n";
  std::vector<std::vector<Cell>> rows;
  for (const std::string& f : result_number_fields()) {
    const auto v = r.result.find(f);
    if (v == r.result.end() || !v->is_number()) continue;
    rows.push_back({text(f), v->is_number_integer() ? integer(v->get<int64_t>()) : number(v->get<double>())});
  }
  b += table_html({"field", "value"}, rows);
  b += "<h2>Validation loss</h2>\n";
  site.files[dir + "loss.svg"] = run_loss_svg(r);
  b += "<figure><img src=\"loss.svg\" alt=\"validation loss by step\"></figure>\n";
  // The per-layer fields the run recorded: where the stream grows, where the gradient vanishes;
  // the profiles against the same fields at initialization (the run's config probed).
  LayerInit init;
  std::string init_problem;
  try {
    init = probe_layer_init(r.dir);
  } catch (const Error& e) {
    init_problem = e.what();
  }
  for (const char* field : {"stream_norm", "block_grad_norm"}) {
    bool has = false;
    for (const json& m : r.metrics) has = has || (m.contains(field) && m[field].is_array() && !m[field].empty());
    if (!has) continue;
    LayerHistory h;
    try {
      h = read_layer_history(r.dir, field);
    } catch (const UsageError& e) {  // a run someone edited: the page says so, the site is still written
      b += fmt::format("<h2>{} by layer</h2>\n<p>Not drawn: {}</p>\n", field, esc(e.what()));
      continue;
    }
    site.files[dir + field + "_heatmap.svg"] = plot_layer_heatmap_svg(h);
    site.files[dir + field + "_profile.svg"] =
        init_problem.empty() ? plot_layer_profile_lines_svg(h, init.of(field), init.label) : plot_layer_profile_lines_svg(h);
    b += fmt::format("<h2>{} by layer</h2>\n<figure><img src=\"{}_heatmap.svg\" alt=\"{} by layer and step\"></figure>\n"
                     "<figure><img src=\"{}_profile.svg\" alt=\"{} by layer, first and last evaluation\"></figure>\n",
                     field, field, field, field, field);
    if (!init_problem.empty()) b += fmt::format("<p>No line at initialization: {}</p>\n", esc(init_problem));
  }
  b += "<h2>Metrics (metrics.jsonl)</h2>\n<div class=\"wide\">";
  std::vector<std::string> cols;
  for (const char* k : {"step", "lr", "train_loss", "val_loss", "val_loss_se", "excess_loss", "grad_norm", "final_norm_out"})
    for (const json& m : r.metrics)
      if (m.contains(k)) {
        cols.push_back(k);
        break;
      }
  rows.clear();
  for (const json& m : r.metrics) {
    std::vector<Cell> row;
    for (const std::string& k : cols) row.push_back(k == "step" ? integer(inum(m, k.c_str())) : number(num(m, k.c_str()), k == "lr" ? 6 : 4));
    rows.push_back(row);
  }
  b += rows.empty() ? "<p>No evaluation was recorded.</p>\n" : table_html(cols, rows);
  b += "</div>\n<h2>Config</h2>\n";
  rows.clear();
  for (const auto& [k, v] : r.config.items()) rows.push_back({text(k), text(v.is_string() ? v.get<std::string>() : v.dump())});
  b += table_html({"key", "value"}, rows);
  site.page(dir + "index.html", "run " + r.name, b);
}

std::string summary_cell_html(const SummaryCell& c) {
  if (!c.present) return "";
  std::string s;
  if (c.n > 0) s = fmt::format("{:.4f}", c.mean) + (c.n > 1 ? fmt::format(" &plusmn; {:.4f}", c.std) : "");
  std::vector<std::string> notes;
  if (c.collapsed) notes.push_back(status_html("collapsed", fmt::format("{} collapsed", c.collapsed)));
  if (c.diverged) notes.push_back(status_html("diverged", fmt::format("{} diverged", c.diverged)));
  if (c.failed) notes.push_back(status_html("failed", fmt::format("{} failed", c.failed)));
  if (c.pending) notes.push_back(status_html("pending", fmt::format("{} pending", c.pending)));
  for (const std::string& n : notes) s += (s.empty() ? "" : " ") + n;
  return s;
}

void sweep_page(Site& site, const SweepInfo& sw) {
  const std::string dir = "sweeps/" + sw.name + "/";
  const SweepSummary& s = sw.summary;
  std::string b;
  b += fmt::format("<p>Sweep directory <code>{}</code>: {} points; {} completed, {} collapsed, {} diverged, {} failed, {} pending{}.</p>\n",
                   esc(sw.dir), s.points, s.completed, s.collapsed, s.diverged, s.failed, s.pending,
                   s.damaged ? fmt::format(", {} damaged", s.damaged) : "");
  b += fmt::format("<h2>Summary: {} (mean &plusmn; std over seeds)</h2>\n<div class=\"wide\">", esc(s.metric));
  std::vector<std::string> head = {s.rows.empty() ? "run" : s.rows};
  for (const std::string& c : s.col_labels) head.push_back(c);
  std::vector<std::vector<Cell>> rows;
  for (size_t r = 0; r < s.row_values.size(); ++r) {
    std::vector<Cell> row = {std::isfinite(s.row_numbers[r]) ? Cell{esc(s.row_values[r]), fmt::format("{:.17g}", s.row_numbers[r]), true}
                                                             : text(s.row_values[r])};
    for (size_t c = 0; c < s.col_labels.size(); ++c) {
      const SummaryCell& cell = s.cells[r][c];
      row.push_back({summary_cell_html(cell), cell.n > 0 ? fmt::format("{:.17g}", cell.mean) : "", true});
    }
    rows.push_back(row);
  }
  b += table_html(head, rows) + "</div>\n";
  b += "<h2>Plots</h2>\n";
  site.files[dir + "loss_curves.svg"] = plot_loss_curves_svg(s);
  site.files[dir + "final_vs_rows.svg"] = plot_final_vs_rows_svg(s);
  b += "<figure><img src=\"loss_curves.svg\" alt=\"validation loss by step\"></figure>\n";
  b += fmt::format("<figure><img src=\"final_vs_rows.svg\" alt=\"{} against {}\"></figure>\n", esc(s.metric), esc(head[0]));
  // Small multiples, one cell per (row, column) of the summary; a grid too large to read is left
  // to the tables.
  const size_t cells = s.row_values.size() * s.col_labels.size();
  if (cells > 0 && cells <= 60 && s.col_labels.size() <= 12) {
    site.files[dir + "multiples_loss.svg"] = plot_sweep_small_multiples_svg(s, SmallMultiple::loss_curves);
    b += "<figure><img src=\"multiples_loss.svg\" alt=\"validation loss by step, one panel per cell\"></figure>\n";
    CellLayers layers;
    try {
      layers = read_cell_layers(sw.dir, s, "block_grad_norm");
    } catch (const UsageError& e) {
      b += fmt::format("<p>Per-layer small multiples not drawn: {}</p>\n", esc(e.what()));
    }
    bool any = false;
    for (const auto& row : layers.cells)
      for (const auto& cell : row) any = any || !cell.empty();
    if (any) {
      site.files[dir + "multiples_grad.svg"] = plot_sweep_small_multiples_svg(s, SmallMultiple::layer_profile, layers);
      b += "<figure><img src=\"multiples_grad.svg\" alt=\"each point's last per-layer gradient norm, one panel per cell\"></figure>\n";
    }
  } else if (cells > 60 || s.col_labels.size() > 12) {
    b += fmt::format("<p>Small multiples: {} cells are too many to read as one figure; the tables hold them "
                     "(<code>normlab plot multiples {} --where ...</code> draws a part).</p>\n", cells, esc(sw.dir));
  }
  b += "<h2>Points</h2>\n<div class=\"wide\">";
  head = {"point"};
  for (const std::string& a : sw.axes) head.push_back(a);
  for (const char* h : {"status", "final val loss", "best val loss", "diverged step", "collapsed step"}) head.push_back(h);
  rows.clear();
  for (const PointInfo& p : sw.points) {
    std::vector<Cell> row;
    row.push_back(p.run ? Cell{link("../../runs/" + p.run->name + "/index.html", p.name), p.name} : text(p.name));
    for (const std::string& a : sw.axes) {
      std::string v;
      for (const auto& [k, val] : p.values)
        if (k == a) v = val;
      char* end = nullptr;
      const double d = std::strtod(v.c_str(), &end);
      row.push_back(!v.empty() && end && *end == '\0' ? Cell{esc(v), fmt::format("{:.17g}", d), true} : text(v));
    }
    row.push_back({status_html(p.status), p.status});
    if (p.run) {
      row.push_back(number(num(p.run->result, "final_val_loss")));
      row.push_back(number(num(p.run->result, "best_val_loss")));
      row.push_back(integer(inum(p.run->result, "diverged_step")));
      row.push_back(integer(inum(p.run->result, "collapsed_step")));
    } else {
      for (int i = 0; i < 4; ++i) row.push_back({"&mdash;", "", true});
    }
    rows.push_back(row);
  }
  b += table_html(head, rows) + "</div>\n";
  site.page(dir + "index.html", "sweep " + sw.name, b);
}

// ---- REPRODUCTION.md ---------------------------------------------------------------------------

// GitHub's heading anchors: lower case, punctuation dropped, spaces to '-'.
std::string anchor_of(const std::string& heading) {
  std::string out;
  for (unsigned char c : heading) {
    if (std::isalnum(c) || c == '-' || c == '_') out += static_cast<char>(std::tolower(c));
    else if (c == ' ') out += '-';
    else if (c >= 0x80) out += static_cast<char>(c);
  }
  return out;
}

// Inline markdown as HTML: code spans, bold, links reduced to their text.
std::string inline_md(const std::string& md) {
  std::string out;
  bool code = false, bold = false;
  for (size_t i = 0; i < md.size(); ++i) {
    if (md[i] == '`') {
      out += code ? "</code>" : "<code>";
      code = !code;
    } else if (!code && md.compare(i, 2, "**") == 0) {
      out += bold ? "</strong>" : "<strong>";
      bold = !bold;
      ++i;
    } else if (!code && md[i] == '[') {
      const size_t close = md.find("](", i);
      const size_t end = close == std::string::npos ? close : md.find(')', close);
      if (end == std::string::npos) {
        out += "[";
        continue;
      }
      out += esc(md.substr(i + 1, close - i - 1));
      i = end;
    } else {
      out += esc(std::string(1, md[i]));
    }
  }
  if (code) out += "</code>";
  if (bold) out += "</strong>";
  return out;
}

std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cur;
  bool code = false;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '`') code = !code;
    if (line[i] == '|' && !code && line[i - 1] != '\\') {
      while (!cur.empty() && cur.back() == ' ') cur.pop_back();
      size_t s = cur.find_first_not_of(' ');
      cells.push_back(s == std::string::npos ? "" : cur.substr(s));
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return cells;
}

// REPRODUCTION.md marks its verdict table for machines: between these two comment lines, a markdown
// table whose columns are claim, verdict and section (a link to the section's heading), in that
// order, its first row their titles. A heading or a title may be reworded without breaking the report.
constexpr const char* kVerdictsBegin = "<!-- verdicts: claim | verdict | section -->";
constexpr const char* kVerdictsEnd = "<!-- end of verdicts -->";

// The marked verdict table's rows, each its cells (claim, verdict, section and any more); none
// without the markers.
std::vector<std::vector<std::string>> verdict_rows(const std::vector<std::string>& lines) {
  std::vector<std::vector<std::string>> rows;
  bool in_table = false, titles_seen = false;
  for (const std::string& line : lines) {
    if (line == kVerdictsBegin) {
      in_table = true;
      continue;
    }
    if (!in_table) continue;
    if (line == kVerdictsEnd || line.rfind("|", 0) != 0) break;  // the marker, or the table's end
    if (line.rfind("|---", 0) == 0) continue;
    if (!titles_seen) {
      titles_seen = true;
      continue;
    }
    std::vector<std::string> cells = table_cells(line);
    if (cells.size() >= 3) rows.push_back(std::move(cells));
  }
  return rows;
}

// The experiments page: each row of the verdict table, linked to the sweeps its section cites.
bool experiments_page(Site& site, const std::string& md_path, const std::set<std::string>& sweeps_in_site) {
  const std::string md = read_file(md_path);
  std::vector<std::string> lines;
  size_t at = 0;
  while (at <= md.size()) {
    size_t end = md.find('\n', at);
    if (end == std::string::npos) end = md.size();
    lines.push_back(md.substr(at, end - at));
    at = end + 1;
  }
  // Sections: anchor -> sweeps cited from the heading to the next heading of its level or above.
  struct Section {
    std::string title;
    int level;
    std::set<std::string> sweeps;
  };
  std::map<std::string, Section> sections;
  std::vector<std::string> open;  // anchors of the enclosing headings
  std::vector<int> open_levels;
  for (const std::string& line : lines) {
    int level = 0;
    while (level < static_cast<int>(line.size()) && line[level] == '#') ++level;
    if (level >= 2 && level <= 4 && line.size() > static_cast<size_t>(level) && line[level] == ' ') {
      while (!open_levels.empty() && open_levels.back() >= level) open.pop_back(), open_levels.pop_back();
      const std::string title = line.substr(level + 1);
      const std::string a = anchor_of(title);
      sections[a] = {title, level, {}};
      open.push_back(a);
      open_levels.push_back(level);
      continue;
    }
    for (size_t p = line.find("results/sweeps/"); p != std::string::npos; p = line.find("results/sweeps/", p + 1)) {
      size_t e = p + 15;
      while (e < line.size() && (std::isalnum(static_cast<unsigned char>(line[e])) || line[e] == '-' || line[e] == '_' || line[e] == '.')) ++e;
      std::string name = line.substr(p + 15, e - p - 15);
      while (!name.empty() && name.back() == '.') name.pop_back();
      if (!name.empty())
        for (const std::string& a : open) sections[a].sweeps.insert(name);
    }
  }
  std::vector<std::vector<Cell>> rows;
  for (const std::vector<std::string>& cells : verdict_rows(lines)) {
    std::string sweeps_html;
    const size_t hash = cells[2].find("(#");
    std::string section_html = inline_md(cells[2]);
    if (hash != std::string::npos) {
      const std::string a = cells[2].substr(hash + 2, cells[2].find(')', hash) - hash - 2);
      const auto s = sections.find(a);
      if (s != sections.end()) {
        section_html = esc(s->second.title);
        for (const std::string& name : s->second.sweeps)
          sweeps_html += (sweeps_html.empty() ? "" : ", ") +
                         (sweeps_in_site.count(name) ? link("sweeps/" + name + "/index.html", name) : esc(name) + " (not in this report)");
      }
    }
    rows.push_back({{inline_md(cells[0]), ""}, {inline_md(cells[1]), ""}, {section_html, ""}, {sweeps_html.empty() ? "&mdash;" : sweeps_html, ""}});
  }
  if (rows.empty()) return false;
  std::string b = fmt::format("<p>The claims of <code>{}</code>'s verdict table, each with the sweeps its section cites.</p>\n", esc(md_path));
  b += table_html({"claim", "verdict", "section", "sweeps"}, rows);
  site.page("experiments.html", "Experiments: the claims and their sweeps", b);
  return true;
}

// ---- finding what to report -------------------------------------------------------------------

void find(const std::string& input, std::vector<std::string>& sweep_dirs, std::vector<std::pair<std::string, std::string>>& run_dirs) {
  std::error_code ec;
  const fs::path root = fs::path(input).lexically_normal();
  const fs::file_status st = fs::symlink_status(root, ec);
  NL_USAGE(fs::exists(st), "cannot read '{}': no such file or directory", shown(input, 200));
  NL_USAGE(fs::is_directory(st), "'{}' is not a directory (a run or sweep directory, or a folder of them)", shown(input, 200));
  if (is_sweep_dir(root)) {
    sweep_dirs.push_back(root.string());
    return;
  }
  const std::string base = base_name(input);
  if (is_finished_run(root.string())) {
    run_dirs.emplace_back(root.string(), base);
    return;
  }
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  NL_USAGE(!ec, "cannot read '{}': {}", shown(input, 200), ec.message());
  for (; it != end; it.increment(ec)) {
    NL_USAGE(!ec, "cannot read '{}': {}", shown(input, 200), ec.message());
    if (it->is_symlink(ec) || !it->is_directory(ec)) continue;
    const fs::path p = it->path();
    if (is_sweep_dir(p)) {
      sweep_dirs.push_back(p.string());
      it.disable_recursion_pending();
    } else if (is_finished_run(p.string())) {
      run_dirs.emplace_back(p.string(), base + "/" + p.lexically_relative(root).string());
      it.disable_recursion_pending();
    }
  }
}

// Where the site goes, checked before anything is read: nothing there yet, or an earlier site as it
// was written (site_dir.h); never the name a report writes its partial site under.
void check_out(const fs::path& out_abs, const ReportRequest& req) {
  std::string site;
  long pid = 0;
  NL_USAGE(!split_partial(out_abs.string(), &site, &pid),
           "--out '{}' is a partial site's name (a report writes SITE.partial.<pid>, then renames it to SITE): choose "
           "another --out",
           shown(req.out, 200));
  struct stat st {};
  if (::lstat(out_abs.c_str(), &st) == 0) {
    const std::string why = site_dir::refusal(out_abs.string());
    NL_USAGE(why.empty(), "--out '{}' {}; nothing was changed (choose another --out)", shown(req.out, 200), why);
  }
}

// Partial sites left beside OUT by reports that were killed (or killed while removing the site
// they replaced), named: they are not sites, and normlab cannot tell what else they hold.
void name_leftovers(const fs::path& out, const ReportRequest& req) {
  if (!req.on_notice) return;
  for (const std::string& path : {out.string(), out.string() + ".old"})
    for (const std::string& p : stale_partials(path))
      req.on_notice(fmt::format("{} is left from a report that was stopped (its process is gone); it is not a site: "
                                "look at it or remove it (rm -r '{}')",
                                shown(p, 200), shown(p, 200)));
}

// ---- writing the site -------------------------------------------------------------------------

// Throws Interrupted once the command is asked to stop (req.interrupt set). Called between files,
// so that a stopped report leaves OUT as it was.
void stop_if_interrupted(const ReportRequest& req) {
  if (req.interrupt && *req.interrupt)
    throw Interrupted(fmt::format("interrupted by {}; nothing was written", signal_name(*req.interrupt)),
                      static_cast<int>(*req.interrupt));
}

// --out as a path without a trailing '/' ("site/" is "site"): as given, and absolute.
struct OutPaths {
  fs::path out, abs;
};

// Where the site goes, before any reading: a site of ours or nothing, in an existing directory.
OutPaths checked_out_paths(const ReportRequest& req) {
  std::error_code ec;
  OutPaths p;
  p.out = fs::path(req.out).lexically_normal();
  if (p.out.filename().empty()) p.out = p.out.parent_path();
  p.abs = fs::absolute(p.out).lexically_normal();
  if (p.abs.filename().empty()) p.abs = p.abs.parent_path();
  NL_USAGE(p.abs.has_parent_path() && fs::is_directory(p.abs.parent_path(), ec), "the parent directory of --out '{}' does not exist",
           shown(req.out, 200));
  check_output_dir(p.abs.parent_path().string(), "--out");  // where the site is written, before any work
  check_out(p.abs, req);
  return p;
}

// The sweep directories and the finished run directories (with the names they are reported
// under) that the inputs hold, sorted.
struct FoundDirs {
  std::vector<std::string> sweeps;
  std::vector<std::pair<std::string, std::string>> runs;
};

// Every input holds at least one of them.
FoundDirs find_inputs(const ReportRequest& req) {
  FoundDirs found;
  for (const std::string& in : req.inputs) {
    const size_t before = found.sweeps.size() + found.runs.size();
    find(in, found.sweeps, found.runs);
    std::sort(found.sweeps.begin(), found.sweeps.end());
    std::sort(found.runs.begin(), found.runs.end());
    NL_USAGE(found.sweeps.size() + found.runs.size() > before, "'{}' holds no sweep directory and no finished run directory",
             shown(in, 200));
  }
  return found;
}

// OUT (replaced whole) never holds what it reports, nor goes inside a run directory.
void check_apart(const FoundDirs& found, const fs::path& out_abs, const ReportRequest& req) {
  auto apart = [&](const std::string& d) {
    const fs::path dir = fs::absolute(d).lexically_normal();
    const fs::path a = dir.lexically_relative(out_abs), b = out_abs.lexically_relative(dir);
    NL_USAGE((a.empty() || *a.begin() == "..") && (b.empty() || *b.begin() == ".."),
             "--out '{}' and '{}', which it reports, are inside one another", shown(req.out, 200), shown(d, 200));
  };
  for (const std::string& d : found.sweeps) apart(d);
  for (const auto& rd : found.runs) apart(rd.first);
}

// Sweep `d` (reported as `name`) as its spec plans it; each finished point's run is read and
// appended to `runs`.
SweepInfo read_sweep(const std::string& d, const std::string& name, std::deque<RunInfo>& runs, const ReportRequest& req) {
  SweepInfo sw;
  sw.dir = d;
  sw.name = name;
  const SweepPlan plan = plan_stored_sweep(d + "/spec.json");
  sw.axes = plan.axes;
  const std::vector<PointState> states = point_states(d, plan);
  sw.summary = summarize_sweep(d, {});
  for (size_t i = 0; i < plan.points.size(); ++i) {
    PointInfo p;
    p.name = plan.points[i].name;
    p.values = plan.points[i].values;
    p.status = states[i].status;
    if (states[i].done) {
      stop_if_interrupted(req);
      runs.push_back(read_run_info(d + "/runs/" + p.name, sw.name + "/" + p.name));
      p.run = &runs.back();
      const std::string s = str(p.run->result, "status");
      if (s == "collapsed") p.status = s;
    }
    sw.points.push_back(std::move(p));
  }
  return sw;
}

// Everything the site reports, read into memory: the sweeps, and the runs (the sweeps' finished
// points, then from first_standalone on the runs outside sweeps). Read in place by the
// constructor, never moved: the points hold pointers into `runs`.
struct Reported {
  std::vector<SweepInfo> sweeps;
  std::deque<RunInfo> runs;  // a deque: PointInfo points into it as it grows
  size_t first_standalone = 0;

  Reported(const FoundDirs& found, const ReportRequest& req) {
    std::set<std::string> names;
    for (const std::string& d : found.sweeps) {
      const std::string name = base_name(d);
      NL_USAGE(names.insert(name).second, "two sweeps named '{}' ('{}' and another): report them separately", shown(name, 100),
               shown(d, 200));
      sweeps.push_back(read_sweep(d, name, runs, req));
    }
    first_standalone = runs.size();
    std::set<std::string> run_names;
    for (const auto& [d, name] : found.runs) {
      NL_USAGE(run_names.insert(name).second, "two runs would be reported as '{}'", shown(name, 200));
      stop_if_interrupted(req);
      runs.push_back(read_run_info(d, "standalone/" + name));
    }
  }
  Reported(const Reported&) = delete;
  Reported& operator=(const Reported&) = delete;
};

// The REPRODUCTION.md whose claims get a page: --reproduction, else the first input's own; "" for
// none.
std::string reproduction_md(const ReportRequest& req) {
  if (!req.reproduction.empty()) return req.reproduction;
  std::error_code ec;
  for (const std::string& in : req.inputs)
    if (fs::is_regular_file(fs::path(in) / "REPRODUCTION.md", ec)) return (fs::path(in) / "REPRODUCTION.md").string();
  return "";
}

// The front page: a table of the sweeps, then one of the runs outside sweeps.
void index_page(Site& site, const Reported& reported, bool experiments) {
  std::string b;
  if (experiments) b += "<p>" + link("experiments.html", "Experiments") + ": each claim of REPRODUCTION.md with its sweeps.</p>\n";
  b += fmt::format("<h2>Sweeps ({})</h2>\n", reported.sweeps.size());
  std::vector<std::vector<Cell>> rows;
  for (const SweepInfo& sw : reported.sweeps) {
    const SweepSummary& s = sw.summary;
    rows.push_back({{link("sweeps/" + sw.name + "/index.html", sw.name), sw.name}, integer(static_cast<int64_t>(s.points)),
                    integer(static_cast<int64_t>(s.completed)), integer(static_cast<int64_t>(s.collapsed)),
                    integer(static_cast<int64_t>(s.diverged)), integer(static_cast<int64_t>(s.failed)),
                    integer(static_cast<int64_t>(s.pending))});
  }
  b += rows.empty() ? "<p>None.</p>\n" : table_html({"sweep", "points", "completed", "collapsed", "diverged", "failed", "pending"}, rows);
  rows.clear();
  for (size_t i = reported.first_standalone; i < reported.runs.size(); ++i) {
    const RunInfo& r = reported.runs[i];
    rows.push_back({{link("runs/" + r.name + "/index.html", r.name.substr(11)), r.name}, {status_html(str(r.result, "status"), run_status_text(r)), str(r.result, "status")},
                    number(num(r.result, "final_val_loss")), integer(inum(r.result, "steps_done"))});
  }
  b += fmt::format("<h2>Runs outside sweeps ({})</h2>\n", rows.size());
  b += rows.empty() ? "<p>None.</p>\n" : table_html({"run", "status", "final val loss", "steps"}, rows);
  site.page("index.html", "normlab report", b);
}

// Every page of the site with its figures, the stylesheet and the sorting script, in memory.
// Whether it has the experiments page.
bool render_site(Site& site, const Reported& reported, const ReportRequest& req) {
  for (const SweepInfo& sw : reported.sweeps) {
    stop_if_interrupted(req);
    sweep_page(site, sw);
    for (const PointInfo& p : sw.points)
      if (p.run) {
        stop_if_interrupted(req);
        run_page(site, *p.run, sw.name);
      }
  }
  for (size_t i = reported.first_standalone; i < reported.runs.size(); ++i) {
    stop_if_interrupted(req);
    run_page(site, reported.runs[i], "");
  }
  const std::string md = reproduction_md(req);
  bool experiments = false;
  if (!md.empty()) {
    std::set<std::string> in_site;
    for (const SweepInfo& sw : reported.sweeps) in_site.insert(sw.name);
    experiments = experiments_page(site, md, in_site);
  }
  index_page(site, reported, experiments);
  site.files["style.css"] = kStyle;
  site.files["sort.js"] = kSortJs;
  return experiments;
}

// The site written whole under a temporary name (made here, so never a directory someone else
// has), then put in OUT's place; the temporary directory is removed if that fails.
void publish(const Site& site, const OutPaths& out, const ReportRequest& req) {
  name_leftovers(out.out, req);
  stop_if_interrupted(req);
  const std::string tmp = partial_path(out.abs.string());
  if (::mkdir(tmp.c_str(), 0755) != 0) {
    NL_USAGE(errno != EEXIST, "'{}' is left from a report that was stopped (its process had this one's pid); it is not a "
             "site: look at it or remove it (rm -r '{}')", shown(tmp, 200), shown(tmp, 200));
    throw UsageError(fmt::format("cannot create '{}': {}", shown(tmp, 200), std::strerror(errno)));
  }
  const auto stop = [&req] { stop_if_interrupted(req); };
  std::error_code ec;
  try {
    site_dir::write(tmp, site.files, stop);
    stop();  // the last moment the command can still stop with nothing changed
    site_dir::install(tmp, out.abs.string(), req.out, req.on_notice);
  } catch (const Interrupted& e) {
    fs::remove_all(tmp, ec);  // made above by this process
    throw Interrupted(fmt::format("interrupted by {}; the unfinished site {} was removed", signal_name(e.signal), shown(tmp, 200)),
                      e.signal);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace

ReportResult write_report(const ReportRequest& req) {
  NL_USAGE(!req.inputs.empty(), "report needs run or sweep directories (or a folder of them, e.g. results/)");
  NL_USAGE(!req.out.empty(), "--out needs a directory name");
  if (!req.reproduction.empty()) ReadableFile check(req.reproduction);  // every input checked before the work
  const OutPaths out = checked_out_paths(req);
  const FoundDirs found = find_inputs(req);
  check_apart(found, out.abs, req);
  const Reported reported(found, req);
  Site site;
  const bool experiments = render_site(site, reported, req);
  publish(site, out, req);
  ReportResult r;
  r.out = req.out;
  r.sweeps = reported.sweeps.size();
  r.runs = reported.runs.size();
  r.pages = site.pages;
  r.files = site.files.size() + 1;  // and the marker
  r.experiments = experiments;
  return r;
}

}  // namespace normlab
