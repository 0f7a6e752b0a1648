// Shared by the libFuzzer targets: an input may be refused with a UsageError (one clean error
// line for the user); anything else thrown (an internal Error, a std::exception from a library)
// is a finding, and so is a crash or a sanitizer report.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "normlab/error.h"

namespace normlab::fuzz {

template <class F>
void only_usage_errors(F&& f) {
  try {
    f();
  } catch (const normlab::UsageError& e) {
    // A refusal must be one bounded line.
    const std::string w = e.what();
    if (w.find('\n') != std::string::npos || w.size() > 4096) {
      std::fprintf(stderr, "finding: a multi-line or huge error (%zu bytes)\n", w.size());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finding: %s\n", e.what());
    std::abort();
  }
}

}  // namespace normlab::fuzz
