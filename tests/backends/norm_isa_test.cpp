// The cpu norm kernels of every instruction set, not only the one this machine's build chose:
// norm_kernels.cpp is compiled for tests once more for AVX-512 (x86-64-v4), AVX2 + FMA (x86-64-v3)
// and the portable fallback (x86-64) (CMakeLists.txt: normlab_norm_kernels_isa), and each build
// runs here where the CPU can run it and says it skipped where it cannot. Each must give the same
// bits in every variant (as CpuNormVariants.EveryVariantWritesTheSameBits checks for the library's
// build), agree with the plain multipass loops to float32's rounding, and keep NaN rows NaN: the
// vector widths, tails and reductions differ per ISA, the arithmetic they stand for does not.
// Run: ctest -R CpuNormIsa   (or: test_backends --gtest_filter='CpuNormIsa.*')
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "normlab/bench_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/rng.h"
#include "normlab/tolerances.h"
#include "normlab/tensor.h"

#if defined(NORMLAB_TEST_KERNEL_ISAS)
#include "norm_kernels_isa.h"
#endif

namespace normlab {
namespace {

#if defined(NORMLAB_TEST_KERNEL_ISAS)

using cpu::NormKernelsIsa;
using cpu::NormVariant;

// ---- what the CPU can run ------------------------------------------------------------------
// Each build may use every instruction its -march allows anywhere in its code, so the CPU must
// have all of them (and the OS must save their registers, which __builtin_cpu_supports checks).

struct Feature {
  const char* name;
  bool present;
};
#define NORMLAB_FEATURE(name) Feature{name, __builtin_cpu_supports(name) != 0}

// The features of the x86-64 psABI's levels v2 (SSE3 to SSE4.2, POPCNT, CMPXCHG16B, LAHF/SAHF) and
// v3 (AVX, AVX2, BMI1, BMI2, F16C, FMA, LZCNT, MOVBE, XSAVE): -march=x86-64-v3. Clang (14) has no
// name for some of them; a clang build checks the ones it can name.
std::vector<Feature> x86_64_v3() {
  return {NORMLAB_FEATURE("sse3"),   NORMLAB_FEATURE("ssse3"), NORMLAB_FEATURE("sse4.1"),
          NORMLAB_FEATURE("sse4.2"), NORMLAB_FEATURE("popcnt"), NORMLAB_FEATURE("avx"),
          NORMLAB_FEATURE("avx2"),   NORMLAB_FEATURE("bmi"),    NORMLAB_FEATURE("bmi2"),
          NORMLAB_FEATURE("fma"),
#if !defined(__clang__)
          NORMLAB_FEATURE("cmpxchg16b"), NORMLAB_FEATURE("lahf_lm"), NORMLAB_FEATURE("f16c"),
          NORMLAB_FEATURE("lzcnt"),      NORMLAB_FEATURE("movbe"),   NORMLAB_FEATURE("xsave"),
#endif
  };
}

// -march=x86-64-v4: v3 and AVX-512 F, BW, CD, DQ, VL.
std::vector<Feature> x86_64_v4() {
  std::vector<Feature> f = x86_64_v3();
  for (Feature g : {NORMLAB_FEATURE("avx512f"), NORMLAB_FEATURE("avx512bw"), NORMLAB_FEATURE("avx512cd"),
                    NORMLAB_FEATURE("avx512dq"), NORMLAB_FEATURE("avx512vl")})
    f.push_back(g);
  return f;
}
#undef NORMLAB_FEATURE

// The features this CPU lacks, named ("" when it has them all).
std::string missing(const std::vector<Feature>& features) {
  std::string m;
  for (const Feature& f : features)
    if (!f.present) m += (m.empty() ? "" : ", ") + std::string(f.name);
  return m;
}

#define NORMLAB_SKIP_UNLESS_CPU_HAS(features, isa)                                                     \
  do {                                                                                                 \
    const std::string lacking = missing(features);                                                    \
    if (!lacking.empty()) GTEST_SKIP() << "this CPU has no " << lacking << ": the " isa " kernels are " \
                                       << "not tested on this machine";                               \
  } while (0)

// ---- inputs and comparisons ------------------------------------------------------------------

float* fp(const Tensor& t) { return t.data<float>(); }
Tensor e32(const Shape& s) { return Tensor::empty(s, DType::f32); }  // 64-byte aligned: streams

// A float32 tensor of N(mean, scale^2) values from the check stream.
Tensor randn(Rng& rng, const Shape& shape, double scale = 1.0, double mean = 0.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = mean + scale * rng.normal();
  return Tensor::from(v, shape, DType::f32);
}

// The same bits, NaN payloads and signed zeros included.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(fp(a), fp(b), static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

// atol + rtol*|want|, from the one table of tolerances (normlab/tolerances.h, which compares with
// a float64 reference; here the reference is float32's multipass loops, whose own rounding is of
// the same order, so the same bounds hold).
using Tol = Tolerance;
using tol::kForward;
using tol::kGradient;
using tol::kReduction;

void expect_near(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  const float *g = fp(got), *w = fp(want);
  int64_t bad = 0;
  std::string report;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double diff = std::fabs(double(g[i]) - double(w[i]));
    if (diff <= tol.atol + tol.rtol * std::fabs(double(w[i]))) continue;
    if (++bad <= 5) {
      char line[160];
      std::snprintf(line, sizeof line, "\n  [%lld] got %.9g want %.9g diff %.3g", static_cast<long long>(i), g[i],
                    w[i], diff);
      report += line;
    }
  }
  if (bad)
    ADD_FAILURE() << what << ": " << bad << " of " << got.numel() << " values outside atol " << tol.atol
                  << " + rtol " << tol.rtol << "*|want|" << report;
}

// ---- the kernels of one build ----------------------------------------------------------------

// Every variant but onednn (oneDNN's own kernel, the same in every build), tiled-2048 first: the
// one the others are compared with.
std::vector<NormVariant> variants() {
  std::vector<NormVariant> v;
  for (const char* store : {"", "+nt"})
    for (const char* walk : {"tiled-2048", "tiled-16", "tiled-1024", "tiled-4096", "pipelined-pf0", "pipelined-pf1",
                             "pipelined-pf2", "pipelined-pf4"})
      v.push_back(cpu::parse_norm_variant(std::string(walk) + store));
  return v;
}

struct Inputs {
  int64_t n, d;
  Tensor x, a, dy, gamma, beta;
  Inputs(int64_t rows, int64_t cols, uint64_t seed) : n(rows), d(cols) {
    Rng rng(seed, stream::check);
    x = randn(rng, {n, d}, 2.0, 0.5);
    a = randn(rng, {n, d});
    dy = randn(rng, {n, d});
    gamma = randn(rng, {d}, 0.2, 1.0);
    beta = randn(rng, {d}, 0.2);
  }
};

constexpr float kAlpha = 0.7f;  // the residual add's s = alpha*a + x

// Every output of every kernel of build k, written by variant v: the forwards, the backwards (from
// the forward's statistics) with dx and with the parameter gradients alone.
struct Outputs {
  std::vector<Tensor> all;
  std::vector<const char*> names;
  Tensor add(const char* name, const Shape& shape) {  // a handle to the stored tensor
    names.push_back(name);
    return all.emplace_back(e32(shape));
  }
};

Outputs run(const NormKernelsIsa& k, const NormVariant& v, const Inputs& in) {
  const int64_t n = in.n, d = in.d;
  Outputs o;
  Tensor y = o.add("layernorm y", {n, d}), mean = o.add("layernorm mean", {n}), rstd = o.add("layernorm rstd", {n});
  k.layernorm_forward_with(v, fp(y), fp(mean), fp(rstd), fp(in.x), fp(in.gamma), fp(in.beta), n, d, 1e-5f);
  Tensor dx = o.add("layernorm dx", {n, d}), dg = o.add("layernorm dgamma", {d}), db = o.add("layernorm dbeta", {d});
  k.layernorm_backward_with(v, fp(dx), fp(dg), fp(db), fp(in.dy), fp(in.x), fp(in.gamma), fp(mean), fp(rstd), n, d);
  Tensor pg = o.add("layernorm dgamma without dx", {d}), pb = o.add("layernorm dbeta without dx", {d});
  k.layernorm_backward_with(v, nullptr, fp(pg), fp(pb), fp(in.dy), fp(in.x), fp(in.gamma), fp(mean), fp(rstd), n, d);
  Tensor ry = o.add("rmsnorm y", {n, d}), rr = o.add("rmsnorm rstd", {n});
  k.rmsnorm_forward_with(v, fp(ry), fp(rr), fp(in.x), fp(in.gamma), n, d, 1e-5f);
  Tensor rdx = o.add("rmsnorm dx", {n, d}), rdg = o.add("rmsnorm dgamma", {d});
  k.rmsnorm_backward_with(v, fp(rdx), fp(rdg), fp(in.dy), fp(in.x), fp(in.gamma), fp(rr), n, d);
  Tensor rpg = o.add("rmsnorm dgamma without dx", {d});
  k.rmsnorm_backward_with(v, nullptr, fp(rpg), fp(in.dy), fp(in.x), fp(in.gamma), fp(rr), n, d);
  Tensor s = o.add("add_layernorm s", {n, d}), ay = o.add("add_layernorm y", {n, d});
  Tensor am = o.add("add_layernorm mean", {n}), ar = o.add("add_layernorm rstd", {n});
  k.add_layernorm_forward_with(v, fp(s), fp(ay), fp(am), fp(ar), fp(in.a), fp(in.x), kAlpha, fp(in.gamma),
                               fp(in.beta), n, d, 1e-5f);
  Tensor s2 = o.add("add_rmsnorm s", {n, d}), ry2 = o.add("add_rmsnorm y", {n, d});
  Tensor rr2 = o.add("add_rmsnorm rstd", {n});
  k.add_rmsnorm_forward_with(v, fp(s2), fp(ry2), fp(rr2), fp(in.a), fp(in.x), kAlpha, fp(in.gamma), n, d, 1e-5f);
  return o;
}

// Outputs of run(), by name.
const Tensor& out(const Outputs& o, const std::string& name) {
  for (size_t i = 0; i < o.names.size(); ++i)
    if (name == o.names[i]) return o.all[i];
  throw std::logic_error("no output " + name);
}

// The tiled-2048 outputs against the library's plain multipass loops, each kernel from the same
// inputs (the backwards from the kernel's own statistics, so that only the backward is compared).
void check_against_multipass(const Outputs& o, const Inputs& in, const std::string& where) {
  const int64_t n = in.n, d = in.d;
  Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
  cpu::layernorm_forward_multipass(fp(y), fp(mean), fp(rstd), fp(in.x), fp(in.gamma), fp(in.beta), n, d, 1e-5f);
  expect_near(out(o, "layernorm y"), y, kForward, "layernorm y" + where);
  expect_near(out(o, "layernorm mean"), mean, kForward, "layernorm mean" + where);
  expect_near(out(o, "layernorm rstd"), rstd, kForward, "layernorm rstd" + where);
  Tensor dx = e32({n, d}), dg = e32({d}), db = e32({d});
  cpu::layernorm_backward_multipass(fp(dx), fp(dg), fp(db), fp(in.dy), fp(in.x), fp(in.gamma),
                                    fp(out(o, "layernorm mean")), fp(out(o, "layernorm rstd")), n, d);
  expect_near(out(o, "layernorm dx"), dx, kGradient, "layernorm dx" + where);
  expect_near(out(o, "layernorm dgamma"), dg, kReduction, "layernorm dgamma" + where);
  expect_near(out(o, "layernorm dbeta"), db, kReduction, "layernorm dbeta" + where);
  // Without dx, the same additions in the same order.
  EXPECT_TRUE(same_bits(out(o, "layernorm dgamma without dx"), out(o, "layernorm dgamma"))) << where;
  EXPECT_TRUE(same_bits(out(o, "layernorm dbeta without dx"), out(o, "layernorm dbeta"))) << where;

  Tensor ry = e32({n, d}), rr = e32({n});
  cpu::rmsnorm_forward_multipass(fp(ry), fp(rr), fp(in.x), fp(in.gamma), n, d, 1e-5f);
  expect_near(out(o, "rmsnorm y"), ry, kForward, "rmsnorm y" + where);
  expect_near(out(o, "rmsnorm rstd"), rr, kForward, "rmsnorm rstd" + where);
  Tensor rdx = e32({n, d}), rdg = e32({d});
  cpu::rmsnorm_backward_multipass(fp(rdx), fp(rdg), fp(in.dy), fp(in.x), fp(in.gamma), fp(out(o, "rmsnorm rstd")),
                                  n, d);
  expect_near(out(o, "rmsnorm dx"), rdx, kGradient, "rmsnorm dx" + where);
  expect_near(out(o, "rmsnorm dgamma"), rdg, kReduction, "rmsnorm dgamma" + where);
  EXPECT_TRUE(same_bits(out(o, "rmsnorm dgamma without dx"), out(o, "rmsnorm dgamma"))) << where;

  // s = alpha*a + x, one rounding (an FMA in every build), then the norms of s as stored.
  Tensor s = e32({n, d});
  for (int64_t i = 0; i < n * d; ++i) fp(s)[i] = std::fma(kAlpha, fp(in.a)[i], fp(in.x)[i]);
  EXPECT_TRUE(same_bits(out(o, "add_layernorm s"), s)) << "add_layernorm s" << where;
  EXPECT_TRUE(same_bits(out(o, "add_rmsnorm s"), s)) << "add_rmsnorm s" << where;
  const Tensor& stored = out(o, "add_layernorm s");
  cpu::layernorm_forward_multipass(fp(y), fp(mean), fp(rstd), fp(stored), fp(in.gamma), fp(in.beta), n, d, 1e-5f);
  expect_near(out(o, "add_layernorm y"), y, kForward, "add_layernorm y" + where);
  expect_near(out(o, "add_layernorm mean"), mean, kForward, "add_layernorm mean" + where);
  expect_near(out(o, "add_layernorm rstd"), rstd, kForward, "add_layernorm rstd" + where);
  cpu::rmsnorm_forward_multipass(fp(ry), fp(rr), fp(out(o, "add_rmsnorm s")), fp(in.gamma), n, d, 1e-5f);
  expect_near(out(o, "add_rmsnorm y"), ry, kForward, "add_rmsnorm y" + where);
  expect_near(out(o, "add_rmsnorm rstd"), rr, kForward, "add_rmsnorm rstd" + where);
}

// A NaN in a row makes every y of that row NaN (and its statistics), in every forward kernel and
// variant, and leaves the other rows finite: in the first lane, in a row's tail and in its middle.
void check_nan_rows(const NormKernelsIsa& k, const NormVariant& v, int64_t d, const std::string& where) {
  const int64_t n = 37;
  Inputs in(n, d, 1500 + static_cast<uint64_t>(d));
  const int64_t nan_rows[][2] = {{3, 0}, {20, d - 1}, {36, d / 2}};  // row, column
  for (const auto& rc : nan_rows) fp(in.x)[rc[0] * d + rc[1]] = std::numeric_limits<float>::quiet_NaN();
  auto is_nan_row = [&](int64_t i) {
    for (const auto& rc : nan_rows)
      if (rc[0] == i) return true;
    return false;
  };
  Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n}), s = e32({n, d});
  auto expect_rows = [&](const Tensor& t, int64_t cols, const std::string& what) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if (std::isnan(fp(t)[i * cols + j]) != is_nan_row(i) && ++bad <= 3)
          ADD_FAILURE() << what << where << ": row " << i << " column " << j << " is " << fp(t)[i * cols + j];
  };
  k.layernorm_forward_with(v, fp(y), fp(mean), fp(rstd), fp(in.x), fp(in.gamma), fp(in.beta), n, d, 1e-5f);
  expect_rows(y, d, "layernorm y");
  expect_rows(mean, 1, "layernorm mean");
  expect_rows(rstd, 1, "layernorm rstd");
  k.rmsnorm_forward_with(v, fp(y), fp(rstd), fp(in.x), fp(in.gamma), n, d, 1e-5f);
  expect_rows(y, d, "rmsnorm y");
  expect_rows(rstd, 1, "rmsnorm rstd");
  k.add_layernorm_forward_with(v, fp(s), fp(y), fp(mean), fp(rstd), fp(in.a), fp(in.x), kAlpha, fp(in.gamma),
                               fp(in.beta), n, d, 1e-5f);
  expect_rows(y, d, "add_layernorm y");
  expect_rows(mean, 1, "add_layernorm mean");
  expect_rows(rstd, 1, "add_layernorm rstd");
  k.add_rmsnorm_forward_with(v, fp(s), fp(y), fp(rstd), fp(in.a), fp(in.x), kAlpha, fp(in.gamma), n, d, 1e-5f);
  expect_rows(y, d, "add_rmsnorm y");
  expect_rows(rstd, 1, "add_rmsnorm rstd");
}

// The whole check of build k, which names its ISA `isa` and has vectors of `width` floats.
void check_build(const NormKernelsIsa& k, const char* isa, int64_t width) {
  ASSERT_STREQ(k.norm_kernels_isa(), isa);
  const std::vector<NormVariant> vs = variants();
  for (int64_t d : {1, 7, 16, 33, 64, 100, 256, 1000, 1040, 4112}) {
    const int64_t n = 37;
    const Inputs in(n, d, 1360 + static_cast<uint64_t>(d));
    const std::string where = std::string(" (") + isa + ", d=" + std::to_string(d) + ")";
    const Outputs first = run(k, vs[0], in);
    check_against_multipass(first, in, " of " + vs[0].name() + where);
    for (size_t i = 1; i < vs.size(); ++i) {
      // The +nt variants stream where the rows are whole vectors (the buffers are aligned).
      EXPECT_EQ(k.variant_streams(vs[i], fp(first.all[0]), d), vs[i].stream && d % width == 0)
          << vs[i].name() << where;
      const Outputs other = run(k, vs[i], in);
      for (size_t o = 0; o < first.all.size(); ++o)
        EXPECT_TRUE(same_bits(first.all[o], other.all[o]))
            << first.names[o] << " of " << vs[i].name() << " differs from " << vs[0].name() << where;
    }
    for (const NormVariant& v : vs) check_nan_rows(k, v, d, " of " + v.name() + where);
    if (::testing::Test::HasFailure()) return;  // one row length's report is enough
  }
}

TEST(CpuNormIsa, Avx512) {
  NORMLAB_SKIP_UNLESS_CPU_HAS(x86_64_v4(), "AVX-512 (x86-64-v4)");
  check_build(cpu::kernels_avx512::kNormKernels, "avx512", 16);
}

TEST(CpuNormIsa, Avx2) {
  NORMLAB_SKIP_UNLESS_CPU_HAS(x86_64_v3(), "AVX2 (x86-64-v3)");
  check_build(cpu::kernels_avx2::kNormKernels, "avx2", 8);
}

// x86-64's baseline: every x86-64 CPU runs it.
TEST(CpuNormIsa, Portable) { check_build(cpu::kernels_portable::kNormKernels, "portable", 8); }

#else

TEST(CpuNormIsa, NotBuilt) { GTEST_SKIP() << "the per-ISA builds of the norm kernels are x86-64 only"; }

#endif

}  // namespace
}  // namespace normlab
