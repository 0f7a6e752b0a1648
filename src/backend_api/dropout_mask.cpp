// A dropout call's mask from its rate (dropout_kernels.h).
#include <cmath>

#include "normlab/dropout_kernels.h"
#include "normlab/error.h"

namespace normlab {

DropoutMask DropoutMask::of(double rate, uint64_t key) {
  NL_CHECK(rate >= 0.0 && rate < 1.0, "dropout: the rate must be in [0, 1), got {}", rate);
  DropoutMask m;
  m.key = key;
  m.rate = rate;
  // rate * 2^32, below 2^32 for every rate < 1 that is not within 2^-33 of 1.
  const double threshold = std::floor(std::ldexp(rate, 32));
  m.threshold = static_cast<uint32_t>(std::fmin(threshold, 4294967295.0));
  if (m.threshold == 0) m.rate = 0.0;  // a rate below 2^-32 drops nothing, so it scales nothing
  return m;
}

}  // namespace normlab
