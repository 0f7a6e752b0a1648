// The tests' one helper header.
// - Files: slurp, fresh scratch directories.
// - Closeness: element-wise comparison of values against an oracle (atol + rtol * scale).
// - Finite differences: central differences of a scalar function of a tensor's elements.
// - Programs: run the built `normlab` binary (or any program) as a child process and capture its
//   exit code, stdout and stderr separately. No shell is involved: arguments go to execve as
//   they are, so quotes, spaces and `;` in them are just characters.
//
//   CliResult r = run_cli({"handcalc", "--json"});
//   EXPECT_EQ(r.exit_code, 0) << describe(r);
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "normlab/names.h"

namespace normlab {
class Tensor;
}

namespace normlab::test {

// ---- files ---------------------------------------------------------------------------------
std::string slurp(const std::filesystem::path& p);  // the whole file; empty when unreadable
// <gtest temp dir>/normlab_<name>_<pid>: unique to this process (ctest -j), removed if it exists, not created.
std::filesystem::path fresh_dir(const std::string& name);

// ---- closeness -----------------------------------------------------------------------------
// Every |got[i] - want[i]| <= atol + rtol * |want[i]|, and finite exactly where want is. A failure
// shows the first few mismatches side by side and the largest difference, so that a wrong kernel
// can be told from a loose tolerance at a glance.
void expect_close(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol,
                  const std::string& what);

// ---- finite differences --------------------------------------------------------------------
// dL/dx_i = (L(x + h e_i) - L(x - h e_i)) / 2h over every element of the float64 tensor x,
// perturbed in place and restored.
std::vector<double> numeric_grad(Tensor& x, const std::function<double()>& loss, double h = 1e-6);

// ---- programs ------------------------------------------------------------------------------

struct CliResult {
  int exit_code = -1;     // the child's exit status; 128 + N when killed by signal N
  std::string out;        // everything written to stdout
  std::string err;        // everything written to stderr
  bool timed_out = false; // killed (SIGKILL) after RunOptions::timeout_s
  std::string command;    // the command line, for failure messages
};

struct RunOptions {
  std::string cwd;                 // working directory of the child; empty: this process's
  double timeout_s = 120;          // then the child is killed and timed_out is set
  std::vector<std::pair<std::string, std::string>> env;  // set (or override) these variables
  std::string stdin_text;          // fed to the child's stdin (empty: stdin is /dev/null)
};

// Runs `program` with `args` (argv[0] is `program`).
CliResult run_program(const std::string& program, const std::vector<std::string>& args,
                      const RunOptions& options = {});

// Runs the normlab binary built with the tests (NORMLAB_BINARY), or $NORMLAB_TEST_BINARY when set.
CliResult run_cli(const std::vector<std::string>& args, const RunOptions& options = {});

// Splits text into lines; a trailing newline does not make an empty last line.
std::vector<std::string> split_lines(const std::string& text);

// Command, exit code, stdout and stderr in one string, for EXPECT_... << describe(r).
std::string describe(const CliResult& r);

// A refusal as every command gives one: the exit code (2 unless said), nothing on stdout, one
// line on stderr that starts with "error: " and says `says`; the child did not time out.
void expect_one_error_line(const CliResult& r, const std::string& says, int code = 2);

// Whether text is a SHA-256 in hex: 64 characters 0-9a-f. (No std::regex in the tests: GCC 12's
// -Wmaybe-uninitialized fires inside <regex> under the sanitizer build's -Werror.)
bool is_sha256_hex(const std::string& text);

// Polls `ready` every few milliseconds until it holds (true) or timeout_s passes: then the test
// fails, naming `what` it waited for, and the result is false (a wait never just gives up and
// goes on). `ready` may stop the wait early by throwing; nothing is caught.
bool wait_until(const std::function<bool()>& ready, const std::string& what, double timeout_s = 120);
// ---- enumerations ----------------------------------------------------------------------------
// What is wrong with E's name table, "" when nothing: every value must parse back from its printed
// name (and from that name in upper case) and from each alias, and no spelling may name two values.
template <class E>
std::string names_round_trip_errors() {
  std::string errors;
  const EnumNames& t = enum_names<E>();
  for (E v : kind_values<E>()) {
    std::vector<std::string> spellings = {to_string(v)};
    for (const EnumName& n : t.names)
      if (n.value == static_cast<int>(v)) spellings.insert(spellings.end(), n.aliases.begin(), n.aliases.end());
    std::string upper = spellings.front();
    for (char& c : upper) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    spellings.push_back(upper);
    for (const std::string& s : spellings) {
      const std::optional<E> back = try_parse_kind<E>(s);
      if (!back || *back != v) errors += std::string(t.what) + " '" + s + "' does not name " + to_string(v) + "; ";
    }
  }
  return errors;
}

}  // namespace normlab::test
