// PCG32 with Box-Muller normals: integer arithmetic and libm's log/cos/sin only, so the
// same seed gives the same numbers with any compiler.
#include "normlab/rng.h"

#include <cmath>

namespace normlab {

Rng::Rng(uint64_t seed, uint64_t stream) {
  inc_ = (stream << 1u) | 1u;
  state_ = 0;
  next_u32();
  state_ += seed;
  next_u32();
}

uint32_t Rng::next_u32() {
  uint64_t old = state_;
  state_ = old * 6364136223846793005ULL + inc_;
  auto xorshifted = static_cast<uint32_t>(((old >> 18u) ^ old) >> 27u);
  auto rot = static_cast<uint32_t>(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

// The two draws are sequenced explicitly (the order of the operands of | is unspecified in C++):
// the first is the high half.
uint64_t Rng::next_u64() {
  const uint64_t high = next_u32();
  const uint64_t low = next_u32();
  return (high << 32) | low;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

uint32_t Rng::below(uint32_t n) {
  // Lemire's rejection: drop the values that would make some residues more likely.
  uint32_t threshold = (-n) % n;
  for (;;) {
    uint32_t r = next_u32();
    if (r >= threshold) return r % n;
  }
}

double Rng::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = 0;
  while (u1 <= 0) u1 = uniform();
  double u2 = uniform();
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 6.283185307179586476925286766559 * u2;
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

double Rng::normal(double mean, double stddev) { return mean + stddev * normal(); }

}  // namespace normlab
