// `normlab gradcheck`: finite-difference checks of every op's backward and of whole blocks.
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "cli_common.h"
#include "normlab/backend.h"
#include "normlab/config.h"
#include "normlab/error.h"
#include "normlab/gradcheck.h"
#include "normlab/io.h"

namespace normlab::cli {

namespace {

struct GradcheckArgs {
  std::vector<std::string> ops;
  bool list = false;
  std::string shape;
  uint64_t seed = 0;
  std::string dump;
  bool dump_given = false;  // --dump '' is an error
  bool force = false;       // --dump may replace an earlier dump (never another file)
  double max_seconds = 300;
  std::string backend = "cpu";
  int threads = 1;  // the cases are tiny: a second thread only adds fork/join (and spinning under load)
  std::string precision, norm_compute;
  DeviceOptions dev;
};

int run_gradcheck(const GradcheckArgs& a, const GlobalOptions& g) {
  if (a.list) {
    std::cout << gradcheck_cases_text();
    return 0;
  }
  NL_USAGE(a.threads >= 0 && a.threads <= kMaxThreads, "--threads must be 0 (all cores) .. {}, got {}", kMaxThreads,
           a.threads);
  NL_USAGE(!a.dump_given || !a.dump.empty(), "--dump: no file name given");
  NL_USAGE(std::isfinite(a.max_seconds) && a.max_seconds > 0, "--max-seconds must be a positive number of seconds");
  if (a.dump_given) check_output_file(a.dump, "--dump", a.force, is_gradcheck_dump);
  GradcheckOptions opt;
  if (!a.shape.empty()) opt.shape = parse_case_shape(a.shape);
  opt.seed = a.seed;
  opt.f32_backend = a.backend == "none" ? "" : a.backend;
  // --device cuda / cuda-sim: the float32 check runs on that device's kernels, the cases'
  // tensors moved there (their gradients against the float64 reference's), unless --backend
  // names another; --backend cuda / cuda-sim is the same.
  check_device(a.dev);
  if (a.dev.device != "cpu") {
    NL_USAGE(a.backend == "cpu" || a.backend == a.dev.device, "--device {} checks the {} backend; drop --backend {}",
             a.dev.device, a.dev.device, shown(a.backend));
    opt.f32_backend = a.dev.device;
  } else if (opt.f32_backend == "cuda" || opt.f32_backend == "cuda-sim") {
    check_device(DeviceOptions{opt.f32_backend, false});
  }
  if (!opt.f32_backend.empty()) backend(opt.f32_backend);  // an unknown name is a usage error
  if (!a.precision.empty()) opt.precision = parse_kind<Precision>(a.precision);
  if (!a.norm_compute.empty()) {
    opt.norm_compute = parse_kind<NormCompute>(a.norm_compute);
    NL_USAGE(opt.precision != Precision::fp32, "--norm-compute {} needs --precision bf16 or fp16",
             shown(a.norm_compute));
  }
  NL_USAGE(opt.precision == Precision::fp32 || !opt.f32_backend.empty(),
           "--precision {}: the low-precision check is the backend's; drop --backend none", a.precision);
  set_num_threads(a.threads);

  std::vector<const GradCase*> cases;
  for (const std::string& name : a.ops) {
    NL_USAGE(name.size() <= 64 && shown(name) == name, "--op '{}' is not a gradcheck case (see `normlab gradcheck --list`)",
             shown(name));
    cases.push_back(&find_gradcheck_case(name));
  }
  if (cases.empty())
    for (const GradCase& c : gradcheck_cases()) cases.push_back(&c);
  NL_USAGE(!a.dump_given || cases.size() == 1, "--dump needs exactly one --op (got {})", cases.size());
  // The default shape's cases take well under a second; a chosen one is checked before it runs.
  if (!a.shape.empty()) check_gradcheck_budget(cases, opt, a.shape, a.max_seconds);

  if (a.dump_given) {
    write_output_file(a.dump, gradcheck_dump_json(*cases[0], opt), "--dump", a.force, is_gradcheck_dump);
    spdlog::info("wrote {} for case {}", a.dump, cases[0]->name);
  }

  std::vector<CaseResult> results;
  for (const GradCase* c : cases) {
    results.push_back(check_finite_differences(*c, opt));
    spdlog::debug("{} fd64 {} in {:.3f} s", c->name, results.back().pass ? "ok" : "FAIL", results.back().seconds);
    if (!opt.f32_backend.empty()) {
      results.push_back(check_float32_backend(*c, opt));
      spdlog::debug("{} {} {} in {:.3f} s", c->name, results.back().check, results.back().pass ? "ok" : "FAIL",
                    results.back().seconds);
    }
  }
  if (g.json) {
    std::cout << gradcheck_results_json(results, opt) << "\n";
  } else {
    std::cout << gradcheck_results_text(results, opt);
  }
  return failed_checks(results) == 0 ? 0 : 1;
}

}  // namespace

Runner add_gradcheck(CLI::App& app, GlobalOptions& g) {
  auto args = std::make_shared<GradcheckArgs>();
  CLI::App* sub = app.add_subcommand("gradcheck", "Finite-difference checks of every op's backward, in float64");
  sub->add_option("--op", args->ops, "Check only this case (repeatable); see --list");
  sub->add_flag("--list", args->list, "List the cases and exit");
  sub->add_option("--shape", args->shape, "Sizes BxTxC the cases are built with (default 2x5x8)");
  sub->add_option("--seed", args->seed, "Seed of the random inputs (default 0)")->check(whole_u64);
  add_given_option(*sub, "--dump", args->dump, args->dump_given,
                   "Write inputs, analytic and numeric gradients of one --op as JSON to FILE (a new file; see --force)");
  sub->add_flag("--force", args->force, "Let --dump replace an existing gradcheck dump (never any other file)");
  sub->add_option("--max-seconds", args->max_seconds,
                  "With --shape: refuse when the finite differences are estimated (timed here) to take longer "
                  "(default 300)");
  sub->add_option("--backend", args->backend,
                  "Backend whose float32 gradients are compared with the float64 reference (default cpu; none to skip)");
  sub->add_option("--threads", args->threads, "Threads for the cpu backend (default 1: the cases are tiny; 0 = all cores)");
  sub->add_option("--precision", args->precision,
                  "fp32 | bf16 | fp16: the backend check with activations and gradients stored in the format "
                  "(train's precision; tolerance 8 ulps of the format, docs/precision.md)");
  sub->add_option("--norm-compute", args->norm_compute,
                  "With --precision bf16|fp16: format | fp32 | fused, how the norms run there (default fused)");
  add_device_flags(*sub, args->dev);
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab gradcheck                          every op and composite, float64 finite differences + cpu float32
  normlab gradcheck --op layernorm --op rmsnorm
  normlab gradcheck --list
  normlab gradcheck --op block_post_ln --shape 3x7x16 --seed 4
  normlab gradcheck --op rmsnorm --dump rmsnorm.json   then check it with numpy or PyTorch
  normlab gradcheck --json | jq '.results[] | select(.pass | not)'
  normlab gradcheck --precision fp16 --norm-compute format   the backend's gradients stored in fp16

Columns: max_abs_err = max over elements of |analytic - expected|; max_rel_err = max_abs_err divided by
the input's gradient scale max |expected|. A check passes when max_abs_err <= atol + rtol * scale. Expected is the central difference (fd64) or the float64 reference
gradient (<backend>-f32, or <backend>-bf16 / -fp16 with --precision). Exit status 1 when any check fails.)");
  return [args, &g] { return run_gradcheck(*args, g); };
}

}  // namespace normlab::cli
