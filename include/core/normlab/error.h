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

// The command was stopped by a signal (SIGINT, SIGTERM) and cleaned up after itself: the CLI
// prints one `error:` line and exits with 128 + signal, as a shell does.
class Interrupted : public Error {
 public:
  Interrupted(const std::string& message, int sig) : Error(message), signal(sig) {}
  int signal;
};

// `text` as it may appear inside a one-line error message: control characters (newlines, tabs,
// escapes) written as \n, \t, \xNN, and anything past `max` bytes cut with "... (N bytes)", so
// that a 100 MB value or a value with newlines never makes a giant or multi-line error.
std::string shown(const std::string& text, size_t max = 60);

// The most threads any command accepts (--threads, the config key threads): more only exhausts
// memory (each OpenMP thread has its own stack).
constexpr int kMaxThreads = 1024;

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
