// gradcheck's text output (gradcheck_results_text, gradcheck_cases_text).
#include <gtest/gtest.h>

#include <string>

#include "normlab/gradcheck.h"

using namespace normlab;

TEST(GradcheckText, OneLinePerInputTheWorstElementUnderAFailure) {
  CaseResult ok{"layernorm", "op", "fd64", {}, true, 0};
  ok.inputs.push_back({"x", {2, 5, 8}, 1.5e-9, 2e-10, -1, 0, 0, true});
  CaseResult bad{"rmsnorm", "op", "cpu-f32", {}, false, 0};
  bad.inputs.push_back({"gamma", {8}, 3e-2, 0.5, 3, 1.25, 1.5, false});
  const std::string text = gradcheck_results_text({ok, bad}, GradcheckOptions{});
  EXPECT_EQ(text,
            "case                 check    input                      shape          max_abs_err max_rel_err  status\n"
            "layernorm            fd64     x                          (2, 5, 8)         1.50e-09    2.00e-10  ok\n"
            "rmsnorm              cpu-f32  gamma                      (8,)              3.00e-02    5.00e-01  FAIL\n"
            "                       worst element 3: analytic 1.25 vs expected 1.5\n"
            "\n"
            "2 checks, 1 failed. Pass: max_abs_err <= atol + rtol * max|expected|: fd64 rtol 1e-07 plus each "
            "input's own difference noise (steps >= 1e-06); f32 vs f64 atol 1e-06 rtol 1e-03\n"
            "FAILED\n");
}

TEST(GradcheckText, ListNamesEveryCase) {
  const std::string text = gradcheck_cases_text();
  EXPECT_EQ(text.rfind("case                 kind       what\n", 0), 0u) << text;
  for (const GradCase& c : gradcheck_cases())
    EXPECT_NE(text.find("\n" + c.name + " "), std::string::npos) << c.name;
}

TEST(GradcheckText, FailedChecksCountsTheCasesThatDidNotPass) {
  const CaseResult ok{"layernorm", "op", "fd64", {}, true, 0};
  const CaseResult bad{"rmsnorm", "op", "cpu-f32", {}, false, 0};
  EXPECT_EQ(failed_checks({}), 0);
  EXPECT_EQ(failed_checks({ok, ok}), 0);
  EXPECT_EQ(failed_checks({bad, ok, bad}), 2);
}
