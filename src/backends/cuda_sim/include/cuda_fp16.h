// cuda-sim's stand-in for cuda_fp16.h: binary16 storage and the two conversions normlab's kernels
// use, rounding as the GPU does (to nearest even, overflow to inf, subnormals kept; NaN stays
// NaN). Written the way fast software conversions are (F. Giesen's float_to_half_fast3_rtne:
// float addition of a magic constant rounds the subnormals, integer arithmetic the normals), so
// that it is a second implementation beside core's precision.cpp, which the tests compare it with.
#pragma once
#include <cstdint>
#include <cstring>

#include "../cuda_sim.h"

struct __half {
  uint16_t bits;
};

inline float __half2float(__half h) {
  constexpr uint32_t kShiftedExp = 0x7c00u << 13;  // the exponent mask after the shift
  uint32_t o = static_cast<uint32_t>(h.bits & 0x7fffu) << 13;
  const uint32_t exp = kShiftedExp & o;
  o += (127u - 15u) << 23;  // rebias
  if (exp == kShiftedExp) {
    o += (128u - 16u) << 23;  // inf or NaN: the largest exponent
  } else if (exp == 0) {      // zero or subnormal: renormalize by a float subtraction (exact)
    o += 1u << 23;
    float f, magic;
    const uint32_t magic_bits = 113u << 23;
    std::memcpy(&f, &o, sizeof f);
    std::memcpy(&magic, &magic_bits, sizeof magic);
    f -= magic;
    std::memcpy(&o, &f, sizeof o);
  }
  o |= static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  float out;
  std::memcpy(&out, &o, sizeof out);
  return out;
}

inline __half __float2half_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t o;
  if (u >= (143u << 23)) {  // >= 2^16: inf, or NaN (quiet)
    o = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < (113u << 23)) {  // below 2^-14: the sum below rounds to the subnormal grid
    const uint32_t magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float v, magic;
    std::memcpy(&v, &u, sizeof v);
    std::memcpy(&magic, &magic_bits, sizeof magic);
    v += magic;
    uint32_t r;
    std::memcpy(&r, &v, sizeof r);
    o = static_cast<uint16_t>(r - magic_bits);
  } else {
    const uint32_t mantissa_odd = (u >> 13) & 1u;
    u += ((15u - 127u) << 23) + 0xfffu;  // rebias, and round: ties to even through mantissa_odd
    u += mantissa_odd;
    o = static_cast<uint16_t>(u >> 13);  // a carry into exponent 31 gives inf (65520 and up)
  }
  return {static_cast<uint16_t>(o | (sign >> 16))};
}
