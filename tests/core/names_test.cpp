// The name tables of core's enumerations (names.h): every value spelled as it prints, in any case
// and by its aliases, parses back to itself; and the defaults core owns for them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "normlab/error.h"
#include "normlab/kinds.h"
#include "normlab/table.h"
#include "normlab/tensor.h"
#include "test_util.h"

using namespace normlab;

TEST(Names, CoreEnumerationsRoundTrip) {
  EXPECT_EQ(test::names_round_trip_errors<NormKind>(), "");
  EXPECT_EQ(test::names_round_trip_errors<Placement>(), "");
  EXPECT_EQ(test::names_round_trip_errors<DType>(), "");
  EXPECT_EQ(test::names_round_trip_errors<OutputFormat>(), "");
}

TEST(Names, NormKindSpellings) {
  // The spellings train and handcalc both accept: both read this one table, so neither refuses a
  // spelling the other takes.
  for (const char* s : {"ln", "LN", "layernorm", "LayerNorm", "LAYERNORM"})
    EXPECT_EQ(parse_kind<NormKind>(s), NormKind::layernorm) << s;
  for (const char* s : {"rms", "rmsnorm", "RMSNorm"}) EXPECT_EQ(parse_kind<NormKind>(s), NormKind::rmsnorm) << s;
  EXPECT_STREQ(to_string(NormKind::layernorm), "layernorm");
}

TEST(Names, DTypePrintsAsPyTorchAndAcceptsShortNames) {
  EXPECT_STREQ(to_string(DType::f32), "float32");
  EXPECT_STREQ(to_string(DType::f64), "float64");
  EXPECT_STREQ(to_string(DType::i32), "int32");
  EXPECT_EQ(parse_kind<DType>("f64"), DType::f64);
  EXPECT_EQ(parse_kind<DType>("Float32"), DType::f32);
}

TEST(Names, TryParseIsEmptyWhereParseThrows) {
  EXPECT_EQ(try_parse_kind<NormKind>("Ln"), NormKind::layernorm);
  EXPECT_FALSE(try_parse_kind<NormKind>("batchnorm").has_value());
  EXPECT_FALSE(try_parse_kind<NormKind>("").has_value());
  try {
    parse_kind<NormKind>("batchnorm");
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(e.what(), "norm 'batchnorm' is not one of " + kind_choices<NormKind>());
    EXPECT_EQ(kind_choices<NormKind>().rfind("none, layernorm, rmsnorm, ", 0), 0u);
  }
}

TEST(Names, DefaultEpsOfEachNorm) {
  // Every norm that divides by a statistic has a positive default (with 0 a constant row, for
  // RMSNorm a zero row, would divide by zero), and the others have none: every kind of the name
  // table, so that a norm is held to it the day it is added.
  for (NormKind k : kind_values<NormKind>()) EXPECT_EQ(has_eps(k), default_eps(k) > 0) << to_string(k);
  // The values are part of what a recorded run means: most config.json files under results/ hold
  // norm_eps 0, i.e. these defaults, and would rerun as other runs if they changed. LayerNorm's is
  // PyTorch's nn.LayerNorm default (eps=1e-05), RMSNorm's LLaMA's.
  EXPECT_EQ(default_eps(NormKind::layernorm), 1e-5);
  EXPECT_EQ(default_eps(NormKind::rmsnorm), 1e-6);
}

// scripts/normlab_mirror.py's DEFAULT_EPS (what every script uses for norm_eps 0) says what
// default_eps says: the scripts cannot include C++, so this reads the line they import.
TEST(Names, ScriptsDefaultEpsIsCores) {
  const std::string py = test::slurp(std::string(NORMLAB_SOURCE_DIR) + "/scripts/normlab_mirror.py");
  const size_t line = py.find("\nDEFAULT_EPS = {");
  ASSERT_NE(line, std::string::npos) << "no DEFAULT_EPS line in scripts/normlab_mirror.py";
  const std::string text = py.substr(line, py.find('\n', line + 1) - line);
  for (NormKind k : {NormKind::layernorm, NormKind::rmsnorm}) {
    const std::string key = std::string("\"") + to_string(k) + "\": ";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos) << text;
    EXPECT_EQ(std::strtod(text.c_str() + at + key.size(), nullptr), default_eps(k)) << text;
  }
}
