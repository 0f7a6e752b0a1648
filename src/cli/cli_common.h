// Shared by the subcommand files: global options and how a subcommand is registered.
// main.cpp is a table of subcommands; each subcommand file parses its options into a
// config struct, calls the library and prints. No arithmetic lives in src/cli.
#pragma once
#include <CLI/CLI.hpp>
#include <csignal>
#include <functional>
#include <string>

namespace normlab::cli {

struct GlobalOptions {
  bool json = false;   // stdout is one JSON document
  int verbose = 0;     // -v (repeatable)
  bool quiet = false;  // -q: warnings and errors only
};

// A subcommand returns its exit code; it throws UsageError for bad input.
using Runner = std::function<int()>;

// Adds the options every subcommand shares (--json, -v, -q) to `sub`.
void add_global_flags(CLI::App& sub, GlobalOptions& g);

// --device cpu|cuda and --tf32, for the commands that run kernels (train, sweep, gradcheck,
// bench). Not config keys: the device changes where a run computes, not what it computes (a
// config's hash, and so a sweep's resume, does not depend on it).
struct DeviceOptions {
  std::string device = "cpu";
  bool tf32 = false;  // cuBLAS may use TF32 tensor cores for float32 products (cuda only)
};
void add_device_flags(CLI::App& sub, DeviceOptions& d);
// Checks the choice: for cuda, a usable device (UsageError "no CUDA device found (...)": exit 2),
// and sets TF32. Does not change any backend.
void check_device(const DeviceOptions& d);
// check_device, then, for cuda and cuda-sim, makes that device the compute device: train keeps
// its model, optimizer state and activations there (set_compute_device).
void use_device(const DeviceOptions& d);

// SIGINT, SIGTERM and SIGHUP from now on only set the flag returned (to the signal's number): the
// work stops at its next check and cleans up after itself (the caller passes the flag to the
// library as RunOptions::interrupt and the like). SA_RESETHAND: a second Ctrl-C kills.
const volatile std::sig_atomic_t* catch_interrupts();

// The flag names of a config key: "--eval_every,--eval-every" (config files use the underscore,
// most command lines the hyphen; both are accepted).
std::string config_flag_names(const std::string& key);

// A CLI11 check for an unsigned 64-bit option (a seed): CLI11 alone reads "-1" as 2^64 - 1 and
// wraps 2^64 to 0. Digits only, at most 2^64 - 1.
inline std::string whole_u64(const std::string& text) {
  const std::string bad = "must be a whole number from 0 to 18446744073709551615, got '" +
                          (text.size() > 40 ? text.substr(0, 40) + "..." : text) + "'";
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos) return bad;
  if (text.size() == 20 && text > "18446744073709551615") return bad;
  return "";
}

// A CLI11 check for a count of steps (--save_every, --calibrate): digits only, at most 2^40 (train's
// bound on steps); CLI::NonNegativeNumber would quote its whole double range in the error.
inline std::string whole_count(const std::string& text) {
  const std::string bad = "must be a non-negative integer of at most 1099511627776 (2^40), got '" +
                          (text.size() > 40 ? text.substr(0, 40) + "..." : text) + "'";
  if (text.empty() || text.size() > 13 || text.find_first_not_of("0123456789") != std::string::npos) return bad;
  return std::stoll(text) <= (int64_t{1} << 40) ? "" : bad;
}

// An option whose empty value is an error rather than "not given" (--out '', --resume ''):
// `given` records that it was on the command line at all.
inline CLI::Option* add_given_option(CLI::App& sub, const std::string& name, std::string& value, bool& given,
                                     const std::string& help) {
  return sub.add_option_function<std::string>(
      name,
      [&value, &given](const std::string& v) {
        value = v;
        given = true;
      },
      help);
}

// Subcommand registration: each returns the runner invoked when the subcommand is chosen.
Runner add_handcalc(CLI::App& app, GlobalOptions& g);
Runner add_gradcheck(CLI::App& app, GlobalOptions& g);
Runner add_probe(CLI::App& app, GlobalOptions& g);
Runner add_train(CLI::App& app, GlobalOptions& g);
Runner add_bench(CLI::App& app, GlobalOptions& g);
Runner add_sweep(CLI::App& app, GlobalOptions& g);
Runner add_convert(CLI::App& app, GlobalOptions& g);
Runner add_export(CLI::App& app, GlobalOptions& g);
Runner add_report(CLI::App& app, GlobalOptions& g);
Runner add_plot(CLI::App& app, GlobalOptions& g);
Runner add_sample(CLI::App& app, GlobalOptions& g);

}  // namespace normlab::cli
