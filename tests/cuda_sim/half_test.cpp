// cuda-sim's fp16 and bf16 conversions (its stand-ins for cuda_fp16.h and cuda_bf16.h, which the
// CUDA kernels call to store those formats) against independent references on every value of
// each format, every midpoint between neighbours and the float32 values beside both: fp16 against
// the compiler's _Float16, bf16 against float64 arithmetic rounding to its grid. The GPU rounds to
// nearest even, overflows to inf and keeps subnormals; so must the stand-ins.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

float fp16_value(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}

float bf16_value(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// bf16's nearest value by float64 arithmetic: 8 significant bits, exponent as float32's.
double bf16_reference(double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const double a = std::fabs(x);
  const int e = std::max(std::ilogb(a), -126);
  const double step = std::ldexp(1.0, e - 7);
  const double r = std::nearbyint(a / step) * step;
  const double max = std::ldexp(255.0, 120);
  return std::copysign(r > max ? std::numeric_limits<double>::infinity() : r, x);
}

// v, its float32 neighbours, and the midpoint to the next value with its neighbours.
std::vector<float> around_every_value(float (*value)(uint16_t)) {
  std::vector<float> out;
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float v = value(static_cast<uint16_t>(b));
    if (!std::isfinite(v)) continue;
    out.insert(out.end(), {v, std::nextafter(v, inf), std::nextafter(v, -inf)});
    const uint16_t nb = static_cast<uint16_t>(b + 1);
    const float next = value(nb);
    if ((nb & 0x8000u) != (b & 0x8000u) || !std::isfinite(next)) continue;
    const float mid = static_cast<float>((static_cast<double>(v) + next) / 2);
    out.insert(out.end(), {mid, std::nextafter(mid, inf), std::nextafter(mid, -inf)});
  }
  // The overflow ties: 65520 for fp16; for bf16 max + half an ulp, 0x7f7f8000 = 3.3961e38.
  float bf16_tie;
  const uint32_t tie_bits = 0x7f7f8000u;
  std::memcpy(&bf16_tie, &tie_bits, sizeof bf16_tie);
  for (float v : {65504.0f, 65519.0f, 65520.0f, std::nextafter(65520.0f, 0.0f), 65536.0f, bf16_tie,
                  std::nextafter(bf16_tie, 0.0f), std::nextafter(bf16_tie, inf), 1e30f, inf,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), std::nanf("")}) {
    out.push_back(v);
    out.push_back(-v);
  }
  return out;
}

bool same(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace

TEST(CudaSimHalf, Fp16ConversionsMatchFloat16) {
  int failures = 0;
  for (float x : around_every_value(fp16_value)) {
    volatile float in = x;
    const float want = static_cast<float>(static_cast<_Float16>(in));
    const float got = __half2float(__float2half_rn(x));
    if (!same(got, want) && ++failures <= 10) ADD_FAILURE() << "fp16(" << x << ") = " << got << ", want " << want;
  }
  EXPECT_EQ(failures, 0);
  for (uint32_t b = 0; b < 0x10000u; ++b) {  // every encoding reads back as _Float16 reads it
    const float want = fp16_value(static_cast<uint16_t>(b));
    ASSERT_TRUE(same(__half2float(__half{static_cast<uint16_t>(b)}), want)) << b;
  }
}

TEST(CudaSimHalf, Bf16ConversionsMatchTheReference) {
  int failures = 0;
  for (float x : around_every_value(bf16_value)) {
    const double want = bf16_reference(x);
    const float got = __bfloat162float(__float2bfloat16_rn(x));
    if (!same(got, static_cast<float>(want)) && ++failures <= 10)
      ADD_FAILURE() << "bf16(" << x << ") = " << got << ", want " << want;
  }
  EXPECT_EQ(failures, 0);
}
