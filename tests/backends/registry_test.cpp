// The backend registry's backends made on first use (register_backend_factory): how the CUDA
// backends are registered, so that a command that never looks them up never loads CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "normlab/backend.h"
#include "normlab/reference_backend.h"

namespace normlab {
namespace {

bool listed(const std::string& name) {
  const std::vector<std::string> names = backend_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(Registry, AFactoryRunsOnceAtTheFirstLookup) {
  static int runs = 0;  // static: the registry outlives this test
  register_backend_factory("test-lazy", [] {
    ++runs;
    return make_reference_backend();
  });
  EXPECT_EQ(runs, 0);
  Backend& first = backend("test-lazy");
  EXPECT_EQ(&backend("test-lazy"), &first);
  EXPECT_TRUE(listed("test-lazy"));
  EXPECT_EQ(runs, 1);
}

TEST(Registry, WhatAFactoryThrowsEveryLookupThrowsAndTheNameIsNotListed) {
  static int runs = 0;
  register_backend_factory("test-lazy-fails", []() -> std::unique_ptr<Backend> {
    ++runs;
    throw UsageError("no test device found");
  });
  for (int i = 0; i < 2; ++i) {
    try {
      backend("test-lazy-fails");
      FAIL() << "the lookup succeeded";
    } catch (const UsageError& e) {
      EXPECT_STREQ(e.what(), "no test device found");
    }
  }
  EXPECT_FALSE(listed("test-lazy-fails"));
  EXPECT_EQ(runs, 1);
  // Registering again replaces it, failure and all.
  register_backend("test-lazy-fails", make_reference_backend());
  EXPECT_TRUE(listed("test-lazy-fails"));
}

// A factory may look up another backend.
TEST(Registry, AFactoryMayLookUpAnotherBackend) {
  register_backend_factory("test-lazy-inner", [] { return make_reference_backend(); });
  static Backend* inner = nullptr;
  register_backend_factory("test-lazy-outer", [] {
    inner = &backend("test-lazy-inner");
    return make_reference_backend();
  });
  backend("test-lazy-outer");
  EXPECT_EQ(inner, &backend("test-lazy-inner"));
}

}  // namespace
}  // namespace normlab

// The thread count is process-wide: a scope restores the count it found, early or at its end, an
// exception included.
TEST(Registry, ThreadCountScopeRestoresThePreviousCount) {
  normlab::set_num_threads(1);
  {
    normlab::ThreadCountScope scope(2);
    EXPECT_EQ(normlab::num_threads(), 2);
    scope.set(3);
    EXPECT_EQ(normlab::num_threads(), 3);
    scope.restore();
    EXPECT_EQ(normlab::num_threads(), 1);
    scope.set(2);
  }
  EXPECT_EQ(normlab::num_threads(), 1);
  try {
    normlab::ThreadCountScope scope(2);
    throw std::runtime_error("stop");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(normlab::num_threads(), 1);
}
