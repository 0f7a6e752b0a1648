// Dropout's mask (dropout_kernels.h has the kernel that applies it): which elements a call drops.
//
// The mask is never stored: element i of a call is kept when the i-th output of SplitMix64 seeded
// with the call's key is at least the call's threshold, a pure function of (key, i). The backward
// regenerates the forward's mask from the same key, attention's backward regenerates the mask of
// the probabilities it recomputes, and every backend (reference, cpu, CUDA and cuda-sim) draws the
// same mask, so their results compare element by element. This header is compiled by nvcc for the
// GPU as well as by the host compiler, so it includes nothing of normlab.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define NORMLAB_HOST_DEVICE __host__ __device__
#else
#define NORMLAB_HOST_DEVICE
#endif

namespace normlab {

// SplitMix64's output function (Steele, Lea and Flood 2014): a bijection of 64 bits whose every
// output bit depends on every input bit.
NORMLAB_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element `index`'s 32 random bits under `key`: SplitMix64's index-th output from state `key`.
NORMLAB_HOST_DEVICE inline uint32_t dropout_bits(uint64_t key, uint64_t index) {
  return static_cast<uint32_t>(mix64(key + (index + 1) * 0x9E3779B97F4A7C15ull) >> 32);
}

// One call's mask: element i is dropped with probability threshold / 2^32 (the rate, to 2^-32)
// and the kept ones are scaled by 1 / (1 - rate), so that the expectation is the input's
// (PyTorch's inverted dropout). Off (threshold 0): every element kept, scale 1.
struct DropoutMask {
  uint64_t key = 0;
  uint32_t threshold = 0;
  double rate = 0.0;

  // rate in [0, 1); Error otherwise.
  static DropoutMask of(double rate, uint64_t key);
  NORMLAB_HOST_DEVICE bool on() const { return threshold != 0; }
  NORMLAB_HOST_DEVICE double keep_scale() const { return 1.0 / (1.0 - rate); }
  NORMLAB_HOST_DEVICE bool keeps(uint64_t index) const { return dropout_bits(key, index) >= threshold; }
};

}  // namespace normlab
