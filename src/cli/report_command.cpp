// `normlab report DIR... --out SITE`: sweeps and runs as one static HTML site (normlab/report.h).
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli_common.h"
#include "normlab/report.h"

namespace normlab::cli {

Runner add_report(CLI::App& app, GlobalOptions& g) {
  auto req = std::make_shared<ReportRequest>();
  CLI::App* sub = app.add_subcommand("report", "Write one static HTML site of sweeps and runs (tables, plots, every point)");
  sub->add_option("dirs", req->inputs, "Run directories, sweep directories, or folders of them (results/)")->required();
  sub->add_option("--out", req->out, "The site's directory (default: report); an earlier site there is replaced");
  sub->add_option("--reproduction", req->reproduction,
                  "A REPRODUCTION.md whose verdict table gets a page linking each claim to its sweeps (default: the "
                  "first DIR's REPRODUCTION.md, if any)");
  add_global_flags(*sub, g);
  sub->footer(R"(Examples:
  normlab report results/ --out site          (then open site/index.html)
  normlab report sweeps/lr runs/long --out /tmp/site

The site needs nothing from the network (one stylesheet, a few lines of script to sort tables);
it opens from file://. It is written whole under OUT.partial.<pid>, its marker .normlab-report (every
file with its size and SHA-256) last, and then replaces OUT, which must not exist or be a site an
earlier `normlab report` wrote, as it wrote it: a file added to it or changed in it is named and
nothing is replaced. Ctrl-C (SIGINT), SIGTERM or SIGHUP stop it with the partial site removed.)");
  return [req, &g] {
    req->interrupt = catch_interrupts();
    req->on_notice = [](const std::string& s) { spdlog::warn("{}", s); };
    const ReportResult r = write_report(*req);
    if (g.json) {
      std::cout << nlohmann::json{{"out", r.out}, {"sweeps", r.sweeps}, {"runs", r.runs}, {"pages", r.pages}, {"files", r.files},
                                  {"experiments", r.experiments}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else {
      std::printf("wrote %s: %zu pages (%zu sweeps, %zu runs%s), %zu files; open %s/index.html\n", r.out.c_str(), r.pages, r.sweeps,
                  r.runs, r.experiments ? ", the experiments page" : "", r.files, r.out.c_str());
    }
    return 0;
  };
}

}  // namespace normlab::cli
