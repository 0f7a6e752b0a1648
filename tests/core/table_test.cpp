// The one table renderer: text, markdown and CSV of the same rows.
#include <gtest/gtest.h>

#include "normlab/error.h"
#include "normlab/table.h"

using namespace normlab;

namespace {

Table small() {
  Table t;
  t.columns = {{"name"}, {"value", Align::right}};
  t.add_row({"a", "1.5"});
  t.add_line("");
  t.add_row({"longer, name", "10"});
  return t;
}

}  // namespace

TEST(Table, TextPadsToTheWidestCellAndDropsTrailingSpaces) {
  EXPECT_EQ(small().text(),
            "name          value\n"
            "a               1.5\n"
            "\n"
            "longer, name     10\n");
  Table t;
  t.columns = {{"x"}, {"note"}};
  t.add_row({"1", ""});
  EXPECT_EQ(t.text(), "x  note\n1\n");
}

TEST(Table, TextCountsUtf8CharactersNotBytes) {
  Table t;
  t.columns = {{"cell", Align::right}, {"z"}};
  t.add_row({"1 ± 2", "z"});
  EXPECT_EQ(t.text(), " cell  z\n1 ± 2  z\n");
}

TEST(Table, MinWidthAndGapsGiveAFixedLayout) {
  Table t;
  t.columns = {{"step", Align::right, 7, ""}, {"loss", Align::right, 10, " "}, {"what", Align::left, 6, " | "}};
  EXPECT_EQ(t.text_header(), "   step       loss | what\n");
  EXPECT_EQ(t.text_line({"1", "2.5000", "ok"}), "      1     2.5000 | ok\n");
  EXPECT_EQ(t.text_line({"12345678", "2"}), "12345678          2\n");  // a wider cell pushes, as printf's %7s
  t.add_row({"1", "2.5"});
  EXPECT_EQ(t.text(), "   step       loss | what\n      1        2.5\n");
}

TEST(Table, MarkdownAlignsByColumnAndLeavesLinesOut) {
  EXPECT_EQ(small().markdown(),
            "| name | value |\n"
            "|---|---:|\n"
            "| a | 1.5 |\n"
            "| longer, name | 10 |\n");
  Table t;
  t.columns = {{""}, {"b"}};
  t.add_row({"x"});
  EXPECT_EQ(t.markdown(), "|  | b |\n|---|---|\n| x |  |\n");
}

TEST(Table, CsvQuotesFieldsThatNeedIt) {
  EXPECT_EQ(small().csv(), "name,value\na,1.5\n\"longer, name\",10\n");
  EXPECT_EQ(small().render(OutputFormat::csv), small().csv());
  EXPECT_EQ(small().render(OutputFormat::markdown), small().markdown());
  EXPECT_EQ(small().render(OutputFormat::text), small().text());
  EXPECT_THROW(small().render(OutputFormat::json), Error);
}

TEST(Table, RowWithMoreCellsThanColumnsIsAnError) {
  Table t;
  t.columns = {{"a"}};
  EXPECT_THROW(t.add_row({"1", "2"}), Error);
}

TEST(CsvField, QuotesCommasQuotesAndNewlinesOnly) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field(""), "");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
}

TEST(OutputFormat, NamesAndAliases) {
  EXPECT_EQ(parse_kind<OutputFormat>("md"), OutputFormat::markdown);
  EXPECT_EQ(parse_kind<OutputFormat>("Markdown"), OutputFormat::markdown);
  EXPECT_EQ(parse_kind<OutputFormat>("table"), OutputFormat::text);
  EXPECT_EQ(parse_kind<OutputFormat>("CSV"), OutputFormat::csv);
  EXPECT_STREQ(to_string(OutputFormat::json), "json");
  EXPECT_EQ(kind_choices<OutputFormat>(), "text, markdown, csv, json");
  EXPECT_THROW(parse_kind<OutputFormat>("xml"), UsageError);
}
