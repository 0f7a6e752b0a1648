// The test programs' main: the backends are installed once, as the normlab binary does.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "normlab/install_backends.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // The norm kernels' variants are chosen by the fixed rule in the tests (set before any kernel
  // runs, and inherited by the normlab processes the CLI tests start): measuring each new shape
  // class would cost every random-shape test its tuning, and tests must not write a tuning cache
  // into the user's home. The tuner's own tests (tests/backends/norm_tuning_test.cpp) turn it on
  // against a cache of their own; NORMLAB_TUNE already set in the environment is kept.
  setenv("NORMLAB_TUNE", "off", 0);
  const std::string cache = "/tmp/normlab-test-cache-" + std::to_string(getuid());
  setenv("XDG_CACHE_HOME", cache.c_str(), 0);
  normlab::install_backends();
  return RUN_ALL_TESTS();
}
