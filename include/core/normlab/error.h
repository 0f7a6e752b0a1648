// Errors in two layers: NL_CHECK reports file:line at the lowest level; the CLI
// turns a UsageError into one `error:` line and exit code 2, anything else into exit 1.
#pragma once
#include <fmt/core.h>
#include <stdexcept>
#include <string>

namespace normlab {

// A failed internal check or a misuse of the library (wrong shapes, freed graph, ...).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input from the user (a flag, a config file, a shape string): exit code 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace normlab

// NL_CHECK(cond, "fmt {}", args...): throws normlab::Error("<message> [file:line]").
#define NL_CHECK(cond, ...)                                                        \
  do {                                                                             \
    if (!(cond)) ::normlab::detail::check_failed(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

// NL_USAGE(cond, ...): bad user input, no file:line (the user cannot act on it).
#define NL_USAGE(cond, ...)                                                        \
  do {                                                                             \
    if (!(cond)) throw ::normlab::UsageError(::fmt::format(__VA_ARGS__));          \
  } while (0)
