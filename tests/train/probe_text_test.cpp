// probe's text report (probe_report_text): the sections it is given, as aligned tables.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "normlab/probe.h"

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST(ProbeText, PlainStackTableLinesUpAndNothingTrails) {
  normlab::PlainStackOptions so;
  so.layers = 3;
  so.d = 16;
  so.gains = {1.0, 2.0};
  normlab::ProbeOptions opt;
  opt.seeds = 1;
  opt.batch = 2;
  const normlab::PlainStackResult r = normlab::probe_plain_stack(so, opt);
  normlab::ProbeReport report;
  report.options = opt;
  EXPECT_EQ(normlab::probe_report_text(report), "");  // no section asked for
  report.plain_stack = &r;
  const std::string text = normlab::probe_report_text(report);
  EXPECT_EQ(text.rfind("plain-stack: 3 layers", 0), 0u) << text;
  const std::vector<std::string> lines = lines_of(text);
  size_t header = lines.size();
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_TRUE(lines[i].empty() || lines[i].back() != ' ') << "line " << i << " ends in a space: '" << lines[i] << "'";
    if (lines[i].rfind("layer ", 0) == 0 && header == lines.size()) header = i;
  }
  ASSERT_LT(header + 4, lines.size()) << text;
  // Four layers (0..3) under the header, every line as long as the header: right-aligned columns.
  for (size_t l = 0; l <= 3; ++l) {
    const std::string& row = lines[header + 1 + l];
    EXPECT_EQ(row.size(), lines[header].size()) << row;
    EXPECT_EQ(row.substr(0, 5), "    " + std::to_string(l)) << row;
  }
  EXPECT_NE(text.find("||dL/dx_0||"), std::string::npos) << text;
}
