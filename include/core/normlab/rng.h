// normlab's own random numbers: the same stream on every compiler and platform
// (std::normal_distribution is not portable). One stream per purpose (init, data, dropout).
#pragma once
#include <cstdint>

namespace normlab {

// PCG32 (O'Neill 2014, XSH-RR output on a 64-bit LCG), with a stream id so that
// Rng(seed, stream::init) and Rng(seed, stream::data) never overlap.
// Everything an Rng is: saved with a training checkpoint so that a resumed run draws the same
// batches as one that never stopped.
struct RngState {
  uint64_t state = 0, inc = 0;
  bool has_spare = false;
  double spare = 0;
};

class Rng {
 public:
  explicit Rng(uint64_t seed = 0, uint64_t stream = 0);
  uint32_t next_u32();
  uint64_t next_u64();
  double uniform();                          // [0, 1), 53 random bits
  double uniform(double lo, double hi);      // [lo, hi)
  uint32_t below(uint32_t n);                // [0, n), unbiased
  double normal();                           // N(0, 1), Box-Muller, portable
  double normal(double mean, double stddev);
  RngState state() const { return {state_, inc_, has_spare_, spare_}; }
  void set_state(const RngState& s) {
    state_ = s.state;
    inc_ = s.inc;
    has_spare_ = s.has_spare;
    spare_ = s.spare;
  }

 private:
  uint64_t state_ = 0;
  uint64_t inc_ = 0;
  bool has_spare_ = false;
  double spare_ = 0;
};

namespace stream {
constexpr uint64_t init = 1;
constexpr uint64_t data = 2;
constexpr uint64_t dropout = 3;
constexpr uint64_t check = 4;  // gradcheck and test inputs
constexpr uint64_t task = 5;   // the synthetic task's rule (its topic permutations)
constexpr uint64_t sample = 6;  // `normlab sample`'s draws of the next token
}  // namespace stream

}  // namespace normlab
