// normlab: one binary, a table of subcommands.
//   normlab --help            lists the subcommands
//   normlab <command> --help  options and examples of one command
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>


#include <csignal>
#include <cstdio>
#include <iostream>
#include <vector>

#include "cli_common.h"
#include "normlab/error.h"
#include "normlab/about.h"
#include "normlab/backend.h"
#include "normlab/install_backends.h"
#include "normlab/cuda_backend.h"

namespace normlab::cli {

void add_global_flags(CLI::App& sub, GlobalOptions& g) {
  sub.add_flag("--json", g.json, "Print one JSON document on stdout instead of text");
  sub.add_flag("-v,--verbose", g.verbose, "More log output on stderr (repeat for more)");
  sub.add_flag("-q,--quiet", g.quiet, "Only warnings and errors on stderr");
}

std::string config_flag_names(const std::string& key) {
  std::string names = "--" + key;
  if (key.find('_') == std::string::npos) return names;
  std::string hyphen = key;
  for (char& c : hyphen)
    if (c == '_') c = '-';
  return names + ",--" + hyphen;
}

namespace {

using Registrar = Runner (*)(CLI::App&, GlobalOptions&);

// The subcommands that exist. A command is listed here only once it works.
const std::vector<Registrar>& registrars() {
  static const std::vector<Registrar> table = {
      &add_handcalc,
      &add_gradcheck,
      &add_probe,
      &add_train,
      &add_bench,
      &add_sweep,
      &add_convert,
      &add_sample,
      &add_export,
      &add_report,
      &add_plot,
  };
  return table;
}

void setup_logging(const GlobalOptions& g) {
  auto logger = spdlog::stderr_color_mt("normlab");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
  if (g.quiet) {
    spdlog::set_level(spdlog::level::warn);
  } else if (g.verbose >= 2) {
    spdlog::set_level(spdlog::level::trace);
  } else if (g.verbose == 1) {
    spdlog::set_level(spdlog::level::debug);
  } else {
    spdlog::set_level(spdlog::level::info);
  }
}

// The one `error:` line: whatever a message quotes from the input, its newlines and escapes are
// shown escaped and its length is bounded. normlab's own messages cut what they quote, so their
// bound only catches a mistake; the command-line parser's echo a stray argument whole, as typed.
constexpr size_t kMaxErrorBytes = 2000, kMaxParserErrorBytes = 480;
void print_error(const std::string& message, size_t max = kMaxErrorBytes) {
  std::fprintf(stderr, "error: %s\n", normlab::shown(message, max).c_str());
}

// -v: what a command on cuda-sim moved between the host and the simulated device, from the
// simulator's own counters: the evidence that the work ran there, and its transfer budget (a
// device-resident step moves its batch and a few scalars).
void log_device_traffic() {
  if (normlab::compute_device() != normlab::Device::cuda_sim || !spdlog::should_log(spdlog::level::debug)) return;
  const normlab::CudaTransfers t = normlab::cuda_sim_transfers();
  spdlog::debug("cuda-sim traffic: {} uploads ({} bytes), {} downloads ({} bytes)", t.uploads, t.upload_bytes,
                t.downloads, t.download_bytes);
}

}  // namespace
}  // namespace normlab::cli

int main(int argc, char** argv) {
  using namespace normlab::cli;
  // A file-size limit (ulimit -f) must make a write fail (EFBIG, reported with the file's name),
  // not kill the process with SIGXFSZ halfway through a record.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"normlab: measure and explain normalization and residual connections in Transformers"};
  app.name("normlab");
  app.require_subcommand(0, 1);
  bool show_version = false;
  app.add_flag("--version", show_version, "Print normlab's version, the oneDNN it runs with, the compiler and CUDA support");
  app.footer("Run `normlab <command> --help` for the options and examples of a command.");
  GlobalOptions global;

  std::vector<std::pair<CLI::App*, Runner>> commands;
  for (auto reg : registrars()) {
    size_t before = app.get_subcommands({}).size();
    Runner run = reg(app, global);
    auto subs = app.get_subcommands({});
    commands.emplace_back(subs.size() > before ? subs.back() : nullptr, std::move(run));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    print_error(normlab::shown(e.what(), kMaxParserErrorBytes) + " (see `normlab --help`)");
    return 2;
  } catch (const normlab::UsageError& e) {  // a flag's own parser (a list, a count) refused its value
    print_error(e.what());
    return 2;
  }

  if (show_version) {
    std::cout << normlab::version_text();
    return 0;
  }
  setup_logging(global);
  normlab::install_backends();
  for (auto& [sub, run] : commands) {
    if (sub == nullptr || !sub->parsed()) continue;
    try {
      normlab::check_backend_environment();
      const int code = run();
      log_device_traffic();
      return code;
    } catch (const normlab::Interrupted& e) {
      print_error(e.what());
      return 128 + e.signal;
    } catch (const normlab::UsageError& e) {
      print_error(e.what());
      return 2;
    } catch (const std::exception& e) {
      print_error(e.what());
      return 1;
    }
  }
  std::cout << app.help();
  return 0;
}
