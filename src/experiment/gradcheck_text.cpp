// gradcheck's text output, on core's table renderer.
#include <fmt/printf.h>

#include "normlab/gradcheck.h"
#include "normlab/table.h"

namespace normlab {

std::string gradcheck_cases_text() {
  Table t;
  t.columns = {{"case", Align::left, 20}, {"kind", Align::left, 10, " "}, {"what", Align::left, 0, " "}};
  for (const GradCase& c : gradcheck_cases()) t.add_row({c.name, c.kind, c.description});
  return t.text();
}

std::string gradcheck_results_text(const std::vector<CaseResult>& results, const GradcheckOptions& opt) {
  Table t;
  t.columns = {{"case", Align::left, 20},           {"check", Align::left, 8, " "},
               {"input", Align::left, 26, " "},     {"shape", Align::left, 14, " "},
               {"max_abs_err", Align::right, 11, " "}, {"max_rel_err", Align::right, 11, " "},
               {"status", Align::left, 0, "  "}};
  for (const CaseResult& r : results) {
    for (const InputCheck& ic : r.inputs) {
      const std::string name = ic.input.size() > 26 ? "..." + ic.input.substr(ic.input.size() - 23) : ic.input;
      t.add_row({r.name, r.check, name, shape_str(ic.shape), fmt::format("{:.2e}", ic.max_abs_err),
                 fmt::format("{:.2e}", ic.max_rel_err), ic.pass ? "ok" : "FAIL"});
      if (!ic.pass)
        t.add_line(fmt::sprintf("%-20s   worst element %lld: analytic %.10g vs expected %.10g", "",
                                static_cast<long long>(ic.worst_index), ic.worst_analytic, ic.worst_numeric));
    }
  }
  const int failed = failed_checks(results);
  const int checks = static_cast<int>(results.size());
  return t.text() + fmt::sprintf("\n%d checks, %d failed. Pass: max_abs_err <= atol + rtol * max|expected|: "
                                 "fd64 rtol %.0e plus each input's own difference noise (steps >= %.0e); "
                                 "f32 vs f64 atol %.0e rtol %.0e\n",
                                 checks, failed, opt.fd_tol.rtol, opt.h, opt.f32_tol.atol, opt.f32_tol.rtol) +
         (failed ? "FAILED\n" : "all gradients agree\n");
}

}  // namespace normlab
