// The test programs' main: the backends are installed once, as the normlab binary does.
#include <gtest/gtest.h>

#include "normlab/backends.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  normlab::install_backends();
  return RUN_ALL_TESTS();
}
