// The 16-bit formats emulated in float32 (precision.h): rounding to bf16 / fp16 in place, the
// census of what a format would store, and the norm as PyTorch's composite of tensor ops at those
// formats (forward and backward). Each is defined bit for bit: every backend matches the
// reference exactly.
#include <cmath>
#include <iterator>
#include <limits>

#include "cases_internal.h"
#include "normlab/composite_norm_kernels.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/precision.h"

namespace normlab::opcases::detail {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor values_tensor(const std::vector<float>& v) {
  return Tensor::from(std::vector<double>(v.begin(), v.end()), {static_cast<int64_t>(v.size())}, DType::f64);
}

// Every 3rd value of the format, the midpoints to the next one and the float32 values beside
// both: where rounding can go wrong.
std::vector<float> grid_and_midpoints(Precision p) {
  std::vector<float> v;
  for (uint32_t b = 0; b < 0x10000u; b += 3) {
    const float x = from_bits(p, static_cast<uint16_t>(b)), next = from_bits(p, static_cast<uint16_t>(b + 1));
    if (!std::isfinite(x)) continue;
    v.insert(v.end(), {x, std::nextafter(x, kInf), std::nextafter(x, -kInf)});
    if (std::isfinite(next) && std::signbit(next) == std::signbit(x)) {
      const float mid = static_cast<float>((double(x) + next) / 2);
      v.insert(v.end(), {mid, std::nextafter(mid, kInf), std::nextafter(mid, -kInf)});
    }
  }
  return v;
}

// The grid and its midpoints, the overflow ties (65520 in fp16, max + half an ulp in bf16: bits
// 0x7f7f8000) and the float32 values beside them, infinities, NaN, and random values of every
// magnitude from the seed; x0 holds them, x receives them and is rounded in place.
Tensors rounding_inputs(Precision p, uint64_t seed) {
  std::vector<float> v = grid_and_midpoints(p);
  const float tie = static_cast<float>(format_info(p).max + ulp_at(p, format_info(p).max) / 2);
  for (const float x : {65504.0f, 65520.0f, tie, std::nextafter(tie, 0.0f), std::nextafter(tie, kInf), 1e30f, kInf,
                        std::nanf(""), std::numeric_limits<float>::max()})
    v.insert(v.end(), {x, -x});
  Draw draw(seed);
  for (int i = 0; i < 4099; ++i) v.push_back(static_cast<float>(draw.rng.normal() * std::ldexp(1.0, i % 60 - 30)));
  Tensors t;
  t.set("x0", values_tensor(v));
  return t;
}

OpCase round_to_format_case(Precision p, uint64_t seed) {
  OpCase c;
  c.op = "round_to_format";
  c.params = Params().add("format", to_string(p)).add("seed", int64_t(seed)).str();
  c.inputs = [=] { return rounding_inputs(p, seed); };
  const int64_t n = c.inputs().at("x0").numel();
  // Bit for bit what core's round_to gives (the reference's loop).
  c.outputs = {{"x", {n}, tol::kExact}};
  c.call = [p](Backend& b, Tensors& t) {
    run_kernel(b, Copy{t.at("x"), t.at("x0")});
    run_kernel(b, RoundToFormat{t.at("x"), p});
  };
  c.flops = double(n);
  return c;
}

// n values with every kind of event: overflow (and the ties beside it), underflow, subnormals,
// zeros of both signs, inf and NaN every 97th value, the others of every magnitude from the seed.
Tensors census_inputs(int64_t n, uint64_t seed) {
  // The first ten hold an overflow, an underflow and a non-finite value for both formats.
  const float special[] = {65520.0f, std::numeric_limits<float>::max(), 1e-8f, 1e-42f, kInf, std::nanf(""), 0.0f, -0.0f,
                           65504.0f, -kInf, std::nextafter(65520.0f, 0.0f), 1e30f, 3e-8f, 6e-8f, 1e-40f};
  constexpr int64_t kSpecials = sizeof special / sizeof special[0];
  Draw draw(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double magnitude = std::ldexp(1.0, static_cast<int>(i % 90) - 45);
    v[static_cast<size_t>(i)] =
        i % 97 == 5 ? special[(i / 97) % kSpecials] : static_cast<float>(draw.rng.normal() * magnitude);
  }
  Tensors t;
  t.set("x", values_tensor(v));
  return t;
}

const char* const kCensusFields[] = {"count", "nonfinite", "overflow", "underflow", "max_abs"};

OpCase format_census_case(Precision p, int64_t n, uint64_t seed) {
  OpCase c;
  c.op = "format_census";
  c.params = Params().add("format", to_string(p)).add("n", n).add("seed", int64_t(seed)).str();
  c.inputs = [=] { return census_inputs(n, seed); };
  // The census of float32 values: the reference counts them in float32 too.
  c.reference_dtype = DType::f32;
  for (const char* field : kCensusFields) c.outputs.push_back({field, {1}, tol::kExact, false, {}, DType::f64});
  c.call = [p](Backend& b, Tensors& t) {
    const FormatCensus s = format_census(b, t.at("x"), p);
    const double values[] = {double(s.count), double(s.nonfinite), double(s.overflow), double(s.underflow), s.max_abs};
    for (size_t i = 0; i < std::size(kCensusFields); ++i) t.at(kCensusFields[i]).fill_(values[i]);
  };
  c.flops = double(n);
  return c;
}

// The composite norm's rows: 7 of d values on the format's grid (as stored activations are): row 0
// all zero, row i of spread 2^(3i - 12) (rstd from 2^12 down), row 3 around 1000 (a large mean);
// for the backward a dy beside each x, scaled as a loss scale scales it (2^(i - 3)); then gamma ~
// 1 + 0.1 N(0, 1) and beta ~ 0.1 N(0, 1), each drawn beside the other.
constexpr int64_t kCompositeRows = 7;

Tensors composite_inputs(Precision p, int64_t d, uint64_t seed, bool backward) {
  const int64_t n = kCompositeRows;
  Draw draw(seed);
  const auto on_grid = [p](double v) { return double(round_to(p, static_cast<float>(v))); };
  std::vector<double> x(static_cast<size_t>(n * d)), dy(x.size()), gamma(static_cast<size_t>(d)), beta(gamma.size());
  for (int64_t i = 0; i < n; ++i) {
    const double spread = i == 0 ? 0.0 : std::ldexp(1.0, static_cast<int>(3 * i) - 12);
    const double offset = i == 3 ? 1000.0 : 0.0;
    for (int64_t j = 0; j < d; ++j) {
      x[static_cast<size_t>(i * d + j)] = on_grid(offset + spread * draw.rng.normal());
      if (backward) dy[static_cast<size_t>(i * d + j)] = on_grid(std::ldexp(draw.rng.normal(), static_cast<int>(i) - 3));
    }
  }
  // The forward's row 5 all 1047 * 2^-15: in fp16 its mean square plus eps 1e-5 is a tie only when
  // eps is rounded to fp16 first (CompositeNormRow.EpsIsRoundedToTheFormatBeforeItIsAdded).
  if (!backward)
    for (int64_t j = 0; j < d; ++j) x[static_cast<size_t>(5 * d + j)] = on_grid(std::ldexp(1047.0, -15));
  for (int64_t j = 0; j < d; ++j) {
    gamma[static_cast<size_t>(j)] = on_grid(1.0 + 0.1 * draw.rng.normal());
    beta[static_cast<size_t>(j)] = on_grid(0.1 * draw.rng.normal());
  }
  Tensors t;
  t.set("x", Tensor::from(x, {n, d}, DType::f64));
  if (backward) t.set("dy", Tensor::from(dy, {n, d}, DType::f64));
  t.set("gamma", Tensor::from(gamma, {d}, DType::f64));
  t.set("beta", Tensor::from(beta, {d}, DType::f64));
  return t;
}

// The statistics the backward reads: the reference's forward (eps 1e-5), in float32 as it is
// defined.
void add_composite_statistics(Tensors& t, Precision p, bool layernorm, int64_t d) {
  const int64_t n = kCompositeRows;
  Tensor y = Tensor::empty({n, d}), rstd = Tensor::empty({n}), mean = layernorm ? Tensor::empty({n}) : Tensor();
  run_kernel(backend("reference"),
             CompositeNormForward{y, mean, rstd, t.at("x").to(DType::f32), t.at("gamma").to(DType::f32),
                                  layernorm ? t.at("beta").to(DType::f32) : Tensor(), n, d, 1e-5, p});
  if (layernorm) t.set("mean", mean.to(DType::f64));
  t.set("rstd", rstd.to(DType::f64));
}

OpCase composite_case(const char* op, Precision p, bool layernorm, int64_t d, uint64_t seed, Params flags) {
  OpCase c;
  c.op = op;
  c.params = Params()
                 .add("d", d)
                 .add("format", to_string(p))
                 .add("norm", layernorm ? "layernorm" : "rmsnorm")
                 .str() +
             " " + flags.add("seed", int64_t(seed)).str();
  // The composite is defined by float32 arithmetic (precision.h): the reference runs it so.
  c.reference_dtype = DType::f32;
  c.flops = 10.0 * double(kCompositeRows * d);
  return c;
}

OpCase composite_forward_case(Precision p, bool layernorm, int64_t d, double eps, uint64_t seed) {
  const int64_t n = kCompositeRows;
  OpCase c = composite_case("composite_norm_fwd", p, layernorm, d, seed, Params().add("eps", eps));
  c.inputs = [=] {
    Tensors t = composite_inputs(p, d, seed, false);
    if (!layernorm) t.erase("beta");
    return t;
  };
  c.outputs = {{"y", {n, d}, tol::kExact}};
  if (layernorm) c.outputs.push_back({"mean", {n}, tol::kExact});
  c.outputs.push_back({"rstd", {n}, tol::kExact});
  c.call = [=](Backend& b, Tensors& t) {
    Tensor no_mean;
    run_kernel(b, CompositeNormForward{t.at("y"), layernorm ? t.at("mean") : no_mean, t.at("rstd"), t.at("x"),
                                       t.at("gamma"), t.get("beta"), n, d, eps, p});
  };
  return c;
}

OpCase composite_backward_case(Precision p, bool layernorm, int64_t d, uint64_t seed) {
  const int64_t n = kCompositeRows;
  OpCase c = composite_case("composite_norm_bwd", p, layernorm, d, seed, Params());
  c.inputs = [=] {
    Tensors t = composite_inputs(p, d, seed, true);
    add_composite_statistics(t, p, layernorm, d);
    t.erase("beta");
    return t;
  };
  c.outputs = {{"dx", {n, d}, tol::kExact, true}, {"dgamma", {d}, tol::kExact, true}};
  if (layernorm) c.outputs.push_back({"dbeta", {d}, tol::kExact, true});
  c.call = [=](Backend& b, Tensors& t) {
    run_kernel(b, CompositeNormBackward{t.out("dx"), t.out("dgamma"), t.out("dbeta"), t.at("dy"), t.at("x"),
                                        t.at("gamma"), t.get("mean"), t.at("rstd"), n, d, p, nullptr});
  };
  return c;
}

constexpr int64_t kCompositeDims[] = {1, 3, 17, 64, 1001};

}  // namespace

void add_format_cases(std::vector<OpCase>& cases) {
  for (const Precision p : {Precision::bf16, Precision::fp16}) cases.push_back(round_to_format_case(p, 41));
  // Sizes around the cpu kernel's 65536-value chunks.
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{65537}, int64_t{140001}})
    for (const Precision p : {Precision::fp32, Precision::bf16, Precision::fp16})
      cases.push_back(format_census_case(p, n, 43 + static_cast<uint64_t>(n)));
  // Rows of odd and long lengths, in both formats, LayerNorm and RMSNorm; the forward at eps 1e-5
  // and at 1e-12 (zero in fp16), the backward from the forward at 1e-5.
  for (const int64_t d : kCompositeDims)
    for (const Precision p : {Precision::bf16, Precision::fp16})
      for (const bool ln : {true, false})
        for (const double eps : {1e-5, 1e-12})
          cases.push_back(composite_forward_case(p, ln, d, eps, 47 + static_cast<uint64_t>(d)));
  for (const int64_t d : kCompositeDims)
    for (const Precision p : {Precision::bf16, Precision::fp16})
      for (const bool ln : {true, false})
        cases.push_back(composite_backward_case(p, ln, d, 53 + static_cast<uint64_t>(d)));
}

}  // namespace normlab::opcases::detail
