// Tests of the "cpu" backend alone (every backend's kernels against the reference are the op
// cases', tests/opcases): each implementation of the norm kernels (multipass, fused, oneDNN)
// on raw arrays against the reference; the oneDNN primitive cache (a steady state creates
// nothing); simd.h; NaN/Inf propagation; and results that do not depend on the thread count.
// Run: ctest -R Cpu   (or: test_backends --gtest_filter='Cpu*')
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernel_check.h"
#include "kernels.h"
#include "normlab/attention_kernels.h"
#include "normlab/backend.h"
#include "normlab/bench_kernels.h"
#include "normlab/channel_scale_kernels.h"
#include "normlab/cross_entropy_kernels.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/layernorm_kernels.h"
#include "normlab/matmul_kernels.h"
#include "normlab/rmsnorm_kernels.h"
#include "normlab/softmax_kernels.h"
#include "normlab/squash_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/rng.h"
#include "normlab/tensor.h"
#include "simd.h"

namespace normlab {
namespace {

using namespace kernel_check;

// Every implementation of the norm kernels, called on raw arrays as a benchmark calls them.
using LnFwd = void (*)(float*, float*, float*, const float*, const float*, const float*, int64_t,
                       int64_t, float);
using LnBwd = void (*)(float*, float*, float*, const float*, const float*, const float*,
                       const float*, const float*, int64_t, int64_t);
using RmsFwd = void (*)(float*, float*, const float*, const float*, int64_t, int64_t, float);
using RmsBwd = void (*)(float*, float*, const float*, const float*, const float*, const float*,
                        int64_t, int64_t);

TEST(CpuNormKernels, EveryLayerNormImplementationAgainstReference) {
  struct Impl {
    const char* name;
    LnFwd fwd;
    LnBwd bwd;
  };
  const Impl impls[] = {
      {"multipass", cpu::layernorm_forward_multipass, cpu::layernorm_backward_multipass},
      {"fused", cpu::layernorm_forward_onepass, cpu::layernorm_backward_onepass},
      {"onednn", cpu::layernorm_forward_onednn, cpu::layernorm_backward_onednn}};
  uint64_t seed = 1100;
  for (const auto& s : kNormShapes) {
    const int64_t n = s[0], d = s[1];
    NormInputs in(n, d, seed++);
    Tensor y64 = e64({n, d}), mean64 = e64({n}), rstd64 = e64({n});
    run_kernel(ref(), LayerNormForward{y64, mean64, rstd64, f64(in.x), f64(in.gamma), f64(in.beta), n, d, 1e-5});
    Tensor mean_ref = mean64.to(DType::f32), rstd_ref = rstd64.to(DType::f32);
    Tensor dx64 = e64({n, d}), dg64 = e64({d}), db64 = e64({d});
    run_kernel(ref(),
               LayerNormBackward{&dx64, &dg64, &db64, f64(in.dy), f64(in.x), f64(in.gamma), mean64, rstd64, n, d});
    for (const Impl& impl : impls) {
      const std::string what = norm_case(impl.name, n, d);
      Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
      impl.fwd(fp(y), fp(mean), fp(rstd), fp(in.x), fp(in.gamma), fp(in.beta), n, d, 1e-5f);
      expect_close(y, y64, kForward, what + " layernorm y");
      expect_close(mean, mean64, kForward, what + " layernorm mean");
      expect_close(rstd, rstd64, kForward, what + " layernorm rstd");
      // The backward from the reference's statistics rounded to float (the reference used
      // them unrounded: a relative 6e-8 on rstd, inside the gradient tolerance).
      Tensor dx = e32({n, d}), dg = e32({d}), db = e32({d});
      impl.bwd(fp(dx), fp(dg), fp(db), fp(in.dy), fp(in.x), fp(in.gamma), fp(mean_ref),
               fp(rstd_ref), n, d);
      expect_close(dx, dx64, kGradient, what + " layernorm dx");
      expect_close(dg, dg64, kReduction, what + " layernorm dgamma");
      expect_close(db, db64, kReduction, what + " layernorm dbeta");
      // Parameter gradients alone (oneDNN then runs with a scratch dx).
      Tensor dg2 = e32({d});
      impl.bwd(nullptr, fp(dg2), nullptr, fp(in.dy), fp(in.x), fp(in.gamma), fp(mean_ref),
               fp(rstd_ref), n, d);
      expect_close(dg2, dg64, kReduction, what + " layernorm dgamma alone");
      // dx alone (oneDNN then runs backward_data, without parameter gradients).
      Tensor dx2 = e32({n, d});
      impl.bwd(fp(dx2), nullptr, nullptr, fp(in.dy), fp(in.x), fp(in.gamma), fp(mean_ref),
               fp(rstd_ref), n, d);
      expect_close(dx2, dx64, kGradient, what + " layernorm dx alone");
    }
  }
}

TEST(CpuNormKernels, EveryRMSNormImplementationAgainstReference) {
  struct Impl {
    const char* name;
    RmsFwd fwd;
    RmsBwd bwd;
  };
  const Impl impls[] = {
      {"multipass", cpu::rmsnorm_forward_multipass, cpu::rmsnorm_backward_multipass},
      {"fused", cpu::rmsnorm_forward_onepass, cpu::rmsnorm_backward_onepass}};
  uint64_t seed = 1200;
  for (const auto& s : kNormShapes) {
    const int64_t n = s[0], d = s[1];
    NormInputs in(n, d, seed++);
    Tensor y64 = e64({n, d}), rstd64 = e64({n});
    run_kernel(ref(), RmsNormForward{y64, rstd64, f64(in.x), f64(in.gamma), n, d, 1e-6});
    Tensor rstd_ref = rstd64.to(DType::f32);
    Tensor dx64 = e64({n, d}), dg64 = e64({d});
    run_kernel(ref(), RmsNormBackward{&dx64, &dg64, f64(in.dy), f64(in.x), f64(in.gamma), rstd64, n, d});
    for (const Impl& impl : impls) {
      const std::string what = norm_case(impl.name, n, d);
      Tensor y = e32({n, d}), rstd = e32({n});
      impl.fwd(fp(y), fp(rstd), fp(in.x), fp(in.gamma), n, d, 1e-6f);
      expect_close(y, y64, kForward, what + " rmsnorm y");
      expect_close(rstd, rstd64, kForward, what + " rmsnorm rstd");
      Tensor dx = e32({n, d}), dg = e32({d});
      impl.bwd(fp(dx), fp(dg), fp(in.dy), fp(in.x), fp(in.gamma), fp(rstd_ref), n, d);
      expect_close(dx, dx64, kGradient, what + " rmsnorm dx");
      expect_close(dg, dg64, kReduction, what + " rmsnorm dgamma");
    }
  }
}

// A constant row has variance 0: rstd = 1/sqrt(eps), xhat = 0, y = beta, and the oneDNN
// boundary (var' = 1/rstd^2 with eps 0) must give back the same gradients. Rows with a mean of
// 1000 and a spread of 1 test the mean: summed as is, d values near 1000 round at the scale of
// their sum (a float's step at 1e6 is 0.06).
TEST(CpuNormKernels, ConstantRowsAndLargeMean) {
  for (int64_t d : {int64_t{37}, int64_t{1000}}) {
    const int64_t n = 4;
    Rng rng(1300 + static_cast<uint64_t>(d), stream::check);
    std::vector<double> xv(static_cast<size_t>(n * d));
    for (int64_t i = 0; i < n * d; ++i)
      xv[static_cast<size_t>(i)] = i < d ? 2.5 : 1000.0 + rng.normal();
    Tensor x = Tensor::from(xv, {n, d}, DType::f32);
    Tensor gamma = randn(rng, {d}, 0.2, 1.0), beta = randn(rng, {d}, 0.2), dy = randn(rng, {n, d});
    Tensor y64 = e64({n, d}), mean64 = e64({n}), rstd64 = e64({n});
    run_kernel(ref(), LayerNormForward{y64, mean64, rstd64, f64(x), f64(gamma), f64(beta), n, d, 1e-5});
    Tensor dx64 = e64({n, d}), dg64 = e64({d}), db64 = e64({d});
    run_kernel(ref(), LayerNormBackward{&dx64, &dg64, &db64, f64(dy), f64(x), f64(gamma), mean64, rstd64, n, d});
    const std::string what = " constant and large-mean rows, d=" + std::to_string(d);
    struct Impl {
      const char* name;
      LnFwd fwd;
      Tol y;
    };
    // fused: y from x - c (c the row's shift, x - c exact near the mean), so no rounding of
    // the mean at 1000 reaches it: float rounding of O(1) values, as in MeanFarAboveStd.
    // oneDNN sums the raw values: its mean is off by ~1e-4 and y by up to 1.5e-4 (measured at
    // d = 37): 5e-4.
    const Impl impls[] = {{"fused", cpu::layernorm_forward_onepass, {4e-6, 4e-6}},
                          {"onednn", cpu::layernorm_forward_onednn, {5e-4, 1e-5}}};
    for (const Impl& impl : impls) {
      Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
      impl.fwd(fp(y), fp(mean), fp(rstd), fp(x), fp(gamma), fp(beta), n, d, 1e-5f);
      expect_close(y, y64, impl.y, std::string(impl.name) + " layernorm y" + what);
      // A few float roundings at 1000 (6e-8 relative each).
      expect_close(mean, mean64, {0, 3e-7}, std::string(impl.name) + " layernorm mean" + what);
      // The variance is centred, so it does not cancel: rstd to a few float roundings.
      expect_close(rstd, rstd64, {0, 1e-4}, std::string(impl.name) + " layernorm rstd" + what);
    }
    Tensor mean_ref = mean64.to(DType::f32), rstd_ref = rstd64.to(DType::f32);
    for (LnBwd bwd : {cpu::layernorm_backward_onepass, cpu::layernorm_backward_onednn}) {
      Tensor dx = e32({n, d}), dg = e32({d}), db = e32({d});
      bwd(fp(dx), fp(dg), fp(db), fp(dy), fp(x), fp(gamma), fp(mean_ref), fp(rstd_ref), n, d);
      // From the reference's statistics: xhat = (x - mu)*rstd with mu rounded to float carries
      // ~3e-5 (as above); on the constant row rstd = 316 scales the gradient (rtol).
      expect_close(dx, dx64, {2e-4, 1e-4}, "layernorm dx" + what);
      expect_close(dg, dg64, kReduction, "layernorm dgamma" + what);
      expect_close(db, db64, kReduction, "layernorm dbeta" + what);
    }
  }
}

// Rows whose mean is 1e4 times their standard deviation, the case that breaks E[x^2] - E[x]^2
// in float32 (it would cancel all 24 bits), and rows built to defeat the fused kernels' shift
// (an outlier among the first values, a first vector 5 standard deviations off), where they fall
// back to the centred sum. The fused forwards (plain and add + norm) must stay at float32
// rounding of the float64 reference on the float32 input: no error proportional to the mean.
TEST(CpuNormKernels, MeanFarAboveStd) {
  const double eps = 1e-5;
  for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{16}, int64_t{65}, int64_t{1000}, int64_t{4097}}) {
    const int64_t n = 6;
    Rng rng(1350 + static_cast<uint64_t>(d), stream::check);
    std::vector<double> xv(static_cast<size_t>(n * d));
    for (int64_t j = 0; j < d; ++j) {
      const double z = rng.normal();
      auto at = [&](int64_t r) -> double& { return xv[static_cast<size_t>(r * d + j)]; };
      at(0) = 1e4 + z;                                  // mean / std = 1e4
      at(1) = -2.5e5 + 25.0 * rng.normal();             // mean / std = -1e4
      at(2) = j == 0 ? 1e4 : rng.normal();              // an outlier first: the shift is far off
      at(3) = 1e4 + (j < 16 ? 5.0 : 0.0) + rng.normal();  // the first vector 5 std above the rest
      at(4) = rng.normal();
      at(5) = 3e4;                                      // constant: variance 0
    }
    Tensor x = Tensor::from(xv, {n, d}, DType::f32);
    Tensor gamma = randn(rng, {d}, 0.2, 1.0), beta = randn(rng, {d}, 0.2);
    const std::string what = " rows with mean 1e4 x std, d=" + std::to_string(d);
    auto check = [&](const Tensor& in, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                     const std::string& name) {
      Tensor y64 = e64({n, d}), mean64 = e64({n}), rstd64 = e64({n});
      run_kernel(ref(), LayerNormForward{y64, mean64, rstd64, f64(in), f64(gamma), f64(beta), n, d, eps});
      // y = ((x - c) - m)*rstd*gamma + beta: x - c exact near the mean, so only roundings at
      // the scale of y: measured <= 2.4e-6 absolute on |y| <= 5, 1.6e-5 on the outlier row's
      // |y| ~ 64 (2.5e-7 relative).
      expect_close(y, y64, {4e-6, 4e-6}, name + " y" + what);
      // The mean as a float: half a float step at its own scale (6e-8 relative) and roundings
      // of the shifted sum at the row's spread (1/rstd): measured <= 5e-8 of |mean| + 1/rstd,
      // 1.9e-7 on the outlier row (its mean corrected at the scale of its shift, 4 std away).
      const std::vector<double> mu = mean.to_vector(), mu64 = mean64.to_vector(), rs64 = rstd64.to_vector();
      for (int64_t r = 0; r < n; ++r) {
        const double scale = std::fabs(mu64[r]) + 1.0 / rs64[r];
        EXPECT_LE(std::fabs(mu[r] - mu64[r]), 4e-7 * scale) << name << " mean of row " << r << what;
      }
      // rstd from the one-sweep variance within ~1.6 bits of cancellation, or from the centred
      // sum: measured <= 2.3e-7 relative.
      expect_close(rstd, rstd64, {0, 1e-6}, name + " rstd" + what);
    };
    Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
    cpu::layernorm_forward_onepass(fp(y), fp(mean), fp(rstd), fp(x), fp(gamma), fp(beta), n, d, 1e-5f);
    check(x, y, mean, rstd, "fused layernorm");
    // add + norm: s = 0.5*a + x, normalized as stored.
    Tensor a = randn(rng, {n, d}, 0.01), s = e32({n, d});
    cpu::add_layernorm_forward_fused(fp(s), fp(y), fp(mean), fp(rstd), fp(a), fp(x), 0.5f, fp(gamma), fp(beta), n,
                                     d, 1e-5f);
    check(s, y, mean, rstd, "fused add_layernorm");
  }
}

// Every variant of the fused kernels (tiles of any size, the pipeline with any prefetch distance,
// ordinary or streaming stores) writes the same bits: the variant a machine chooses changes the
// speed, never the numbers. On odd row lengths too (row tails, rows shorter than a vector), with
// and without dx in the backward.
TEST(CpuNormVariants, EveryVariantWritesTheSameBits) {
  using cpu::NormVariant;
  std::vector<NormVariant> variants;
  for (bool nt : {false, true}) {
    for (int t : {16, 1024, 2048, 4096}) {
      NormVariant v;
      v.tile_floats = t;
      v.stream = nt;
      variants.push_back(v);
    }
    for (int pf : {0, 1, 2, 4}) {
      NormVariant v;
      v.layout = NormVariant::Layout::pipelined;
      v.prefetch = pf;
      v.stream = nt;
      variants.push_back(v);
    }
  }
  for (int64_t d : {1, 7, 16, 33, 64, 100, 256, 1000, 1040, 4112}) {
    const int64_t n = 37;
    Rng rng(1360 + static_cast<uint64_t>(d), stream::check);
    Tensor x = randn(rng, {n, d}, 2.0, 0.5), a = randn(rng, {n, d}), dy = randn(rng, {n, d});
    Tensor gamma = randn(rng, {d}, 0.2, 1.0), beta = randn(rng, {d}, 0.2);
    // Every output of every fused kernel, written by variant v.
    auto run = [&](const NormVariant& v) {
      std::vector<Tensor> out;
      auto t = [&](const Shape& sh) { return out.emplace_back(e32(sh)); };
      Tensor y = t({n, d}), mean = t({n}), rstd = t({n});
      cpu::layernorm_forward_with(v, fp(y), fp(mean), fp(rstd), fp(x), fp(gamma), fp(beta), n, d, 1e-5f);
      Tensor dx = t({n, d}), dg = t({d}), db = t({d}), pg = t({d}), pb = t({d});
      cpu::layernorm_backward_with(v, fp(dx), fp(dg), fp(db), fp(dy), fp(x), fp(gamma), fp(mean), fp(rstd), n, d);
      cpu::layernorm_backward_with(v, nullptr, fp(pg), fp(pb), fp(dy), fp(x), fp(gamma), fp(mean), fp(rstd), n, d);
      Tensor ry = t({n, d}), rr = t({n}), rdx = t({n, d}), rdg = t({d}), rpg = t({d});
      cpu::rmsnorm_forward_with(v, fp(ry), fp(rr), fp(x), fp(gamma), n, d, 1e-5f);
      cpu::rmsnorm_backward_with(v, fp(rdx), fp(rdg), fp(dy), fp(x), fp(gamma), fp(rr), n, d);
      cpu::rmsnorm_backward_with(v, nullptr, fp(rpg), fp(dy), fp(x), fp(gamma), fp(rr), n, d);
      Tensor s = t({n, d}), ay = t({n, d}), am = t({n}), ar = t({n});
      cpu::add_layernorm_forward_with(v, fp(s), fp(ay), fp(am), fp(ar), fp(a), fp(x), 0.7f, fp(gamma), fp(beta), n, d,
                                      1e-5f);
      Tensor s2 = t({n, d}), ry2 = t({n, d}), rr2 = t({n});
      cpu::add_rmsnorm_forward_with(v, fp(s2), fp(ry2), fp(rr2), fp(a), fp(x), 0.7f, fp(gamma), n, d, 1e-5f);
      return out;
    };
    const std::vector<Tensor> first = run(variants[0]);
    // The variants agree with each other, and with the plain loops to float32's rounding (kForward).
    Tensor ry = e32({n, d}), rm = e32({n}), rr = e32({n});
    cpu::layernorm_forward_multipass(fp(ry), fp(rm), fp(rr), fp(x), fp(gamma), fp(beta), n, d, 1e-5f);
    const std::vector<double> got = first[0].to_vector(), want = ry.to_vector();
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], kForward.atol + kForward.rtol * std::abs(want[i])) << "d=" << d << " i=" << i;
    for (size_t k = 1; k < variants.size(); ++k) {
      const std::vector<Tensor> other = run(variants[k]);
      ASSERT_EQ(first.size(), other.size());
      for (size_t o = 0; o < first.size(); ++o)
        EXPECT_TRUE(first[o].to_vector() == other[o].to_vector())
            << "output " << o << " of " << variants[k].name() << " differs from " << variants[0].name() << ", d=" << d;
    }
  }
}

// Streaming stores only where the output is aligned to the vector width and the rows are whole
// vectors; never for onednn, which stores as it likes.
TEST(CpuNormVariants, StreamsOnlyWhereAligned) {
  cpu::NormVariant v = cpu::parse_norm_variant("pipelined-pf2+nt");
  Tensor out = e32({1024 * 64 + 1});
  EXPECT_TRUE(cpu::variant_streams(v, fp(out), 64));
  EXPECT_FALSE(cpu::variant_streams(v, fp(out) + 1, 64));  // misaligned
  EXPECT_FALSE(cpu::variant_streams(v, fp(out), 65));      // rows not whole vectors
  EXPECT_FALSE(cpu::variant_streams(v, nullptr, 64));
  EXPECT_FALSE(cpu::variant_streams(cpu::parse_norm_variant("pipelined-pf2"), fp(out), 64));
  EXPECT_FALSE(cpu::variant_streams(cpu::parse_norm_variant("onednn"), fp(out), 64));
}

// ============================================================================
// the oneDNN primitive cache
// ============================================================================

// Shapes used nowhere else, so that the first call must create a primitive even when all the
// tests share one process.
TEST(CpuPrimitiveCache, SteadyStateCreatesNoPrimitive) {
  Backend& be = cpu_backend();
  Rng rng(2000, stream::check);
  const int64_t m = 37, k = 41, n = 29, b = 3;
  Tensor a = randn(rng, {b * m * k}), w = randn(rng, {b * k * n}), c = e32({b * m * n});
  Tensor w_shared = randn(rng, {k * n});
  Tensor x = randn(rng, {m, k}), wl = randn(rng, {n, k}), bias = randn(rng, {n}), y = e32({m, n});
  const int64_t bt = 2, t = 11, h = 3, dh = 7, ch = h * dh;
  Tensor q = randn(rng, {bt, t, ch}), kk = randn(rng, {bt, t, ch}), v = randn(rng, {bt, t, ch});
  Tensor out = e32({bt, t, ch}), stats = e32({bt, h, t, 2});
  Tensor dq = e32({bt, t, ch}), dk = e32({bt, t, ch}), dv = e32({bt, t, ch});
  const int64_t ln = 13, ld = 59;
  Tensor lx = randn(rng, {ln, ld}), lg = randn(rng, {ld}), lb = randn(rng, {ld});
  Tensor ly = e32({ln, ld}), lm = e32({ln}), lr = e32({ln}), ldx = e32({ln, ld}), ldg = e32({ld}),
         ldb = e32({ld});

  auto step = [&] {
    run_kernel(be, Matmul{c, a, w, MatmulSpec{b, m, n, k, false, false, true, true, false}});
    run_kernel(be, Matmul{c, a, w_shared, MatmulSpec{b, m, n, k, true, true, true, false, true}});
    run_kernel(be, LinearForward{y, x, wl, bias, Tensor(), m, k, n});
    run_kernel(be, AttentionForward{out, stats, q, kk, v, bt, t, h, dh, 0.3});
    run_kernel(be, AttentionBackward{&dq, &dk, &dv, out, q, kk, v, stats, bt, t, h, dh, 0.3});
    cpu::layernorm_forward_onednn(fp(ly), fp(lm), fp(lr), fp(lx), fp(lg), fp(lb), ln, ld, 1e-5f);
    cpu::layernorm_backward_onednn(fp(ldx), fp(ldg), fp(ldb), fp(ly), fp(lx), fp(lg), fp(lm),
                                   fp(lr), ln, ld);
  };
  const uint64_t before = be.primitives_created();
  step();
  const uint64_t after_first = be.primitives_created();
  // matmul x2, linear, layernorm forward and backward: 5 distinct primitives (attention's products
  // are the backend's own tiled loops, no oneDNN primitive).
  EXPECT_EQ(after_first - before, 5u);
  for (int i = 0; i < 5; ++i) step();
  EXPECT_EQ(be.primitives_created(), after_first) << "a repeated step created primitives";

  // A new shape is a new primitive, once.
  Tensor x2 = randn(rng, {m + 1, k}), y2 = e32({m + 1, n});
  run_kernel(be, LinearForward{y2, x2, wl, bias, Tensor(), m + 1, k, n});
  EXPECT_EQ(be.primitives_created(), after_first + 1);
  run_kernel(be, LinearForward{y2, x2, wl, bias, Tensor(), m + 1, k, n});
  EXPECT_EQ(be.primitives_created(), after_first + 1);
  // accumulate (a sum post-op) is part of the key too.
  run_kernel(be, Matmul{c, a, w, MatmulSpec{b, m, n, k, false, false, true, true, true}});
  EXPECT_EQ(be.primitives_created(), after_first + 2);
}

// A primitive is made for the thread count it runs at: oneDNN fixes a primitive's parallel
// decomposition when it is created, so one made at 1 thread must not be reused at 2.
TEST(CpuPrimitiveCache, ThreadCountIsPartOfTheKey) {
  Backend& be = cpu_backend();
  Rng rng(2001, stream::check);
  const int64_t m = 43, k = 31, n = 23;  // shapes used nowhere else
  Tensor x = randn(rng, {m, k}), w = randn(rng, {n, k}), bias = randn(rng, {n}), y = e32({m, n});
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const uint64_t before = be.primitives_created();
  run_kernel(be, LinearForward{y, x, w, bias, Tensor(), m, k, n});
  EXPECT_EQ(be.primitives_created(), before + 1);
  omp_set_num_threads(2);
  run_kernel(be, LinearForward{y, x, w, bias, Tensor(), m, k, n});
  EXPECT_EQ(be.primitives_created(), before + 2) << "the 1-thread primitive was reused at 2 threads";
  run_kernel(be, LinearForward{y, x, w, bias, Tensor(), m, k, n});
  omp_set_num_threads(1);
  run_kernel(be, LinearForward{y, x, w, bias, Tensor(), m, k, n});
  EXPECT_EQ(be.primitives_created(), before + 2) << "each thread count's primitive is cached";
  omp_set_num_threads(saved);
}

// ============================================================================
// simd.h
// ============================================================================

// The vector layer as this test binary compiles it: the tests are built without the library's
// -march flags, so this is the portable fallback here (an inline namespace per instruction set
// keeps it apart from the library's build, which the kernel tests above cover).
TEST(CpuSimd, TailsReductionsAndNaNRules) {
  namespace sd = cpu::simd;
  const int64_t w = sd::kWidth;
  std::vector<float> src(static_cast<size_t>(w)), dst(static_cast<size_t>(w) + 1);
  for (int64_t i = 0; i < w; ++i) src[static_cast<size_t>(i)] = float(i + 1);
  for (int64_t n = 0; n < w; ++n) {
    std::fill(dst.begin(), dst.end(), -7.0f);
    sd::VF v = sd::load_tail(src.data(), n);
    sd::store(dst.data(), v);
    for (int64_t i = 0; i < w; ++i)
      EXPECT_EQ(dst[static_cast<size_t>(i)], i < n ? float(i + 1) : 0.0f) << "load_tail n=" << n;
    std::fill(dst.begin(), dst.end(), -7.0f);
    sd::store_tail(dst.data(), sd::load(src.data()), n);
    for (int64_t i = 0; i <= w; ++i)
      EXPECT_EQ(dst[static_cast<size_t>(i)], i < n ? float(i + 1) : -7.0f) << "store_tail n=" << n;
    EXPECT_EQ(sd::reduce_add(sd::keep_first(sd::load(src.data()), n)), float(n * (n + 1) / 2));
  }
  EXPECT_EQ(sd::reduce_max(sd::load(src.data())), float(w));
  // row_reduce over every length around the unrolled widths: exact for small integers.
  for (int64_t d = 0; d <= 5 * w + 3; ++d) {
    std::vector<float> x(static_cast<size_t>(d) + 1);
    for (int64_t i = 0; i < d; ++i) x[static_cast<size_t>(i)] = float(i % 7);
    double want = 0;
    for (int64_t i = 0; i < d; ++i) want += x[static_cast<size_t>(i)];
    // Lanes past d load as 0, then +1 would count them: keep_first must drop them.
    float got = sd::row_reduce(
        d, [&](int64_t j, int64_t n) { return sd::load_n(x.data() + j, n) + sd::set1(1.0f); });
    EXPECT_EQ(double(got), want + double(d)) << "row_reduce d=" << d;
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float out[64];
  sd::store(out, sd::max(sd::set1(1.0f), sd::set1(nan)));
  EXPECT_TRUE(std::isnan(out[0])) << "max(c, NaN) must be NaN: the data operand goes second";
  sd::store(out, sd::min(sd::set1(1.0f), sd::set1(nan)));
  EXPECT_TRUE(std::isnan(out[0]));
}

TEST(CpuSimd, ExpAndErfAccuracy) {
  namespace sd = cpu::simd;
  const int64_t w = sd::kWidth;
  double worst_exp = 0, worst_erf = 0;
  std::vector<float> x(static_cast<size_t>(w)), e(static_cast<size_t>(w)),
      f(static_cast<size_t>(w));
  for (double start = -87.0; start < 88.3; start += 0.01 * double(w)) {
    for (int64_t i = 0; i < w; ++i) x[static_cast<size_t>(i)] = float(start + 0.01 * double(i));
    sd::store(e.data(), sd::exp(sd::load(x.data())));
    sd::store(f.data(), sd::erf(sd::load(x.data())));
    for (int64_t i = 0; i < w; ++i) {
      const double xi = x[static_cast<size_t>(i)];
      if (xi > 88.3) continue;
      worst_exp = std::max(worst_exp, std::fabs(e[static_cast<size_t>(i)] / std::exp(xi) - 1.0));
      worst_erf = std::max(worst_erf, std::fabs(f[static_cast<size_t>(i)] - std::erf(xi)));
    }
  }
  // Cephes' expf: ~2 ulp (1.2e-7 relative); the erf approximation: 3.3e-7 absolute.
  EXPECT_LT(worst_exp, 2.5e-7);
  EXPECT_LT(worst_erf, 4e-7);
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {
      std::numeric_limits<float>::quiet_NaN(), inf, -inf, -100.0f, 100.0f, 0.0f};
  for (float v : specials) {
    float out[64];
    sd::store(out, sd::exp(sd::set1(v)));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(out[0])) << "exp(NaN)";
    } else {
      EXPECT_EQ(out[0], v > 88 ? inf : v < -88 ? 0.0f : 1.0f) << "exp(" << v << ")";
    }
    sd::store(out, sd::erf(sd::set1(v)));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(out[0])) << "erf(NaN)";
    }
  }
}

// ============================================================================
// errors, non-finite values, threads
// ============================================================================

TEST(CpuBackend, IdentityAndFloat64Rejected) {
  EXPECT_EQ(cpu_backend().name(), "cpu");
  EXPECT_EQ(cpu_backend().device(), Device::cpu);
  EXPECT_TRUE(cpu_backend().supports(DType::f32));
  EXPECT_FALSE(cpu_backend().supports(DType::f64));
  Tensor x64 = e64({4}), y = e32({4});
  try {
    run_kernel(cpu_backend(), GeluForward{y, nullptr, x64});
    FAIL() << "a float64 input was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
  Tensor wrong = e32({5});
  EXPECT_THROW(run_kernel(cpu_backend(), LayerNormForward{y, wrong, wrong, y, wrong, wrong, 1, 4, 1e-5}),
               Error);
}

// Divergence detection looks for NaN/Inf: the vectorized kernels must not hide them.
TEST(CpuBackend, NonFiniteValuesPropagate) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int64_t d = 37;
  Tensor x = Tensor::full({2, d}, 0.5);
  x.data<float>()[5] = nan;       // row 0
  x.data<float>()[d + 30] = inf;  // row 1, in the vector tail
  Tensor gamma = Tensor::full({d}, 1.0), beta = Tensor::full({d}, 0.0);
  Tensor y = e32({2, d}), mean = e32({2}), rstd = e32({2});
  auto all_nonfinite_row = [&](const Tensor& t, int64_t row) {
    for (int64_t j = 0; j < d; ++j)
      if (std::isfinite(t.data<float>()[row * d + j])) return false;
    return true;
  };
  run_kernel(cpu_backend(), LayerNormForward{y, mean, rstd, x, gamma, beta, 2, d, 1e-5});
  EXPECT_TRUE(all_nonfinite_row(y, 0) && all_nonfinite_row(y, 1)) << "layernorm hid a NaN/Inf";
  run_kernel(cpu_backend(), RmsNormForward{y, rstd, x, gamma, 2, d, 1e-6});
  EXPECT_TRUE(std::isnan(y.data<float>()[5]) && !std::isfinite(rstd.data<float>()[0]))
      << "rmsnorm hid a NaN";
  run_kernel(cpu_backend(), SoftmaxForward{y, x, 2, d});
  EXPECT_TRUE(all_nonfinite_row(y, 0) && all_nonfinite_row(y, 1)) << "softmax hid a NaN/Inf";
  run_kernel(cpu_backend(), GeluForward{y, nullptr, x});
  EXPECT_TRUE(std::isnan(y.data<float>()[5]));
  EXPECT_EQ(y.data<float>()[d + 30], inf);
  run_kernel(cpu_backend(), Scale{y, x, 2.0});
  EXPECT_TRUE(std::isnan(y.data<float>()[5]));
  EXPECT_TRUE(std::isnan(sum_squares(cpu_backend(), x)));
  Tensor logits = Tensor::full({1, 4}, 1.0), probs = e32({1, 4}), loss = e32({1});
  logits.data<float>()[2] = nan;
  run_kernel(cpu_backend(), CrossEntropyForward{loss, probs, logits, Tensor::from_ids({0}, {1}), 1, 4});
  EXPECT_TRUE(std::isnan(loss.item()));
}

// The same inputs give the same bits with 1 and with 2 threads: per-row kernels give each row
// to one thread, and parameter gradients / sums (the norms', DyT's / Derf's alpha and shift, the
// channel scales') are reduced in fixed blocks. Rows of d < 256
// take the tiled kernels, whose groups of rows (statistics finished kWidth rows at once) start
// where each thread's range does; 250 rows split 125/125 so that the groups shift by a row
// count that is not a multiple of the vector width.
TEST(CpuBackend, ResultsDoNotDependOnThreadCount) {
  for (const auto& shape : {std::pair<int64_t, int64_t>{512, 256}, {250, 65}, {512, 64}}) {
    const int64_t n = shape.first, d = shape.second;  // above the threading threshold
    SCOPED_TRACE(std::to_string(n) + "x" + std::to_string(d));
    NormInputs in(n, d, 2100);
    auto run = [&](int threads) {
      set_num_threads(threads);
      Tensor y = e32({n, d}), mean = e32({n}), rstd = e32({n});
      Tensor dx = e32({n, d}), dg = e32({d}), db = e32({d}), rdg = e32({d});
      Tensor ry = e32({n, d}), rrstd = e32({n}), rdx = e32({n, d}), s = e32({n, d}), sy = e32({n, d}),
             smean = e32({n}), srstd = e32({n}), rs = e32({n, d}), rsy = e32({n, d}), rsrstd = e32({n});
      run_kernel(cpu_backend(), LayerNormForward{y, mean, rstd, in.x, in.gamma, in.beta, n, d, 1e-5});
      run_kernel(cpu_backend(), LayerNormBackward{&dx, &dg, &db, in.dy, in.x, in.gamma, mean, rstd, n, d});
      run_kernel(cpu_backend(), RmsNormForward{ry, rrstd, in.x, in.gamma, n, d, 1e-5});
      run_kernel(cpu_backend(), RmsNormBackward{&rdx, &rdg, in.dy, in.x, in.gamma, rrstd, n, d});
      run_kernel(cpu_backend(),
                 AddLayerNormForward{s, sy, smean, srstd, in.x, in.dy, 0.5, in.gamma, in.beta, n, d, 1e-5});
      run_kernel(cpu_backend(), AddRmsNormForward{rs, rsy, rsrstd, in.x, in.dy, 0.5, in.gamma, n, d, 1e-5});
      // DyT's and Derf's alpha and shift gradients, and LayerScale's / ReZero's, are full sums.
      const Tensor alpha = Tensor::full({1}, 0.7), shift = Tensor::full({1}, 0.25);
      Tensor qy = e32({n, d}), qdx = e32({n, d}), qda = e32({1}), qds = e32({1}), qdg = e32({d}), qdb = e32({d});
      run_kernel(cpu_backend(), SquashForward{qy, in.x, alpha, shift, in.gamma, in.beta, n, d, Squash::erf});
      run_kernel(cpu_backend(),
                 SquashBackward{&qdx, &qda, &qds, &qdg, &qdb, in.dy, in.x, alpha, shift, in.gamma, n, d, Squash::erf});
      Tensor tdx = e32({n, d}), tda = e32({1});
      run_kernel(cpu_backend(), SquashBackward{&tdx, &tda, nullptr, nullptr, nullptr, in.dy, in.x, alpha, Tensor(),
                                               in.gamma, n, d, Squash::tanh});
      Tensor cdx = e32({n, d}), cdl = e32({d}), sdl = e32({1});
      run_kernel(cpu_backend(), ChannelScaleBackward{&cdx, &cdl, in.dy, in.x, in.gamma, n, d, d});
      run_kernel(cpu_backend(), ChannelScaleBackward{nullptr, &sdl, in.dy, in.x, alpha, n, d, 1});
      std::vector<double> all;
      for (const Tensor* t : {&y, &mean, &rstd, &dx, &dg, &db, &ry, &rrstd, &rdx, &rdg, &s, &sy, &smean, &srstd, &rs, &rsy,
                              &rsrstd, &qy, &qdx, &qda, &qds, &qdg, &qdb, &tdx, &tda, &cdx, &cdl, &sdl}) {
        auto v = t->to_vector();
        all.insert(all.end(), v.begin(), v.end());
      }
      all.push_back(sum_squares(cpu_backend(), in.x));
      return all;
    };
    const int before = num_threads();
    auto one = run(1), two = run(2);
    set_num_threads(before);
    ASSERT_EQ(one.size(), two.size());
    size_t differ = 0;
    for (size_t i = 0; i < one.size(); ++i) differ += one[i] != two[i];
    EXPECT_EQ(differ, 0u) << "values that changed with the thread count";
  }
}

// The cpu kernel's bf16 rounding (core's loop, run over the threads' chunks) is core's, bit for bit: every 7th upper
// half (signs, exponents, infinities and NaNs among them) with the low halves around the tie, on
// 1 and 2 threads (the chunks' seams). NaNs are compared as bit patterns: quieted the same way.
TEST(CpuRoundToFormat, Bf16IsCoresRoundingBitForBit) {
  std::vector<float> x;
  for (uint32_t high = 0; high <= 0xffffu; high += 7)
    for (const uint32_t low : {0x0u, 0x1u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const uint32_t u = high << 16 | low;
      float f;
      std::memcpy(&f, &u, sizeof f);
      x.push_back(f);
    }
  for (const int threads : {1, 2}) {
    ThreadCountScope scope(threads);
    Tensor t = Tensor::from(std::vector<double>(x.size()), {static_cast<int64_t>(x.size())}, DType::f32);
    std::memcpy(t.data<float>(), x.data(), x.size() * sizeof(float));
    run_kernel(backend("cpu"), RoundToFormat{t, Precision::bf16});
    int64_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = round_to(Precision::bf16, x[i]);
      if (std::memcmp(&want, t.data<float>() + i, sizeof want) != 0 && ++differ <= 5)
        ADD_FAILURE() << "threads " << threads << " at " << i << ": " << t.data<float>()[i] << ", core " << want;
    }
    EXPECT_EQ(differ, 0) << "threads " << threads;
  }
}

// Attention writes no probabilities, so they are read out through one-hot operands: a forward with
// v one-hot at key s0 gives out[t] = P[t, s0], and a backward with dout one-hot at query t0 gives
// dv[s] = P[t0, s] (each a single product with 1 added to zeros: exact). The backward's P must be
// the forward's, bit for bit, rounded to the stored format: recomputed from the forward's row
// statistics by the forward's own arithmetic. The reference backend keeps the same contract (its
// float32 P is its double P rounded once), and so does cuda-sim.
struct ProbsShape {
  int64_t b, t, h, dh;
};

void expect_backward_sees_forward_probs(Backend& be, const ProbsShape& sh) {
  const int64_t b = sh.b, t = sh.t, h = sh.h, dh = sh.dh, c = h * dh, e0 = dh / 2;
  const Device dev = be.device();
  Rng rng(2200, stream::check);
  const Tensor q = randn(rng, {b, t, c}, 2.0).to_device(dev), k = randn(rng, {b, t, c}, 2.0).to_device(dev);
  auto one_hot = [&](int64_t pos) {  // 1 at (every batch, pos, every head's channel e0)
    Tensor x = Tensor::zeros({b, t, c}, DType::f32);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi) x.data<float>()[(bi * t + pos) * c + hi * dh + e0] = 1.0f;
    return x.to_device(dev);
  };
  auto empty = [&](const Shape& s) { return Tensor::empty(s, DType::f32, dev); };
  // P[(bi, hi, t, s)] as the forward weighted v with it.
  std::vector<float> forward(b * h * t * t, 0.0f);
  Tensor stats = empty({b, h, t, 2});
  for (int64_t s0 = 0; s0 < t; ++s0) {
    Tensor out = empty({b, t, c});
    run_kernel(be, AttentionForward{out, stats, q, k, one_hot(s0), b, t, h, dh, 0.37});
    const Tensor host = out.to_device(Device::cpu);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t hi = 0; hi < h; ++hi)
        for (int64_t ti = 0; ti < t; ++ti)
          forward[((bi * h + hi) * t + ti) * t + s0] = host.data<float>()[(bi * t + ti) * c + hi * dh + e0];
  }
  for (const Precision format : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(to_string(format));
    int64_t differ = 0, rounded = 0;
    for (int64_t t0 = 0; t0 < t; ++t0) {
      Tensor dv = empty({b, t, c});
      const Tensor v = randn(rng, {b, t, c}).to_device(dev);
      run_kernel(be, AttentionBackward{nullptr, nullptr, &dv, one_hot(t0), q, k, v, stats, b, t, h, dh, 0.37, format});
      const Tensor host = dv.to_device(Device::cpu);
      for (int64_t bi = 0; bi < b; ++bi)
        for (int64_t hi = 0; hi < h; ++hi)
          for (int64_t s = 0; s <= t0; ++s) {
            const float p = forward[((bi * h + hi) * t + t0) * t + s];
            const float got = host.data<float>()[(bi * t + s) * c + hi * dh + e0];
            differ += got != round_to(format, p);
            rounded += got != p;
          }
    }
    EXPECT_EQ(differ, 0) << "probabilities the backward used that are not the forward's in the format";
    if (format != Precision::fp32) {
      EXPECT_GT(rounded, 50) << "the format's rounding was not applied";
    }
  }
}

// The attention tile's causal softmax (its rows side by side, 8 at a time) is the plain softmax of
// each row's valid prefix, bit for bit, forward, recomputed and backward: row lengths 1 to 70
// (masked tails alone, whole vectors and tails; blocks of 8 and a tail block of 6).
TEST(CpuAttention, TheTilesSoftmaxIsTheRowSoftmaxBitForBit) {
  const int64_t t = 70;
  Rng rng(2300, stream::check);
  const Tensor scores = randn(rng, {t, t}, 3.0), dp = randn(rng, {t, t});
  const float* sc = scores.data<float>();
  std::vector<float> p(sc, sc + t * t), stats(2 * t), again(sc, sc + t * t), ds(dp.data<float>(), dp.data<float>() + t * t);
  cpu::causal_softmax_rows(p.data(), t, 0, t, t, stats.data());
  cpu::causal_probs_rows(again.data(), t, 0, t, t, stats.data());
  cpu::causal_softmax_backward_rows(ds.data(), p.data(), t, t, 0, 1.0f);  // softmax_backward's own scale
  int64_t differ = 0;
  std::vector<float> want(t), want_ds(t);
  for (int64_t i = 0; i < t; ++i) {
    cpu::softmax_forward(want.data(), sc + i * t, 1, i + 1);
    cpu::softmax_backward(want_ds.data(), dp.data<float>() + i * t, want.data(), 1, i + 1);
    for (int64_t j = 0; j < t; ++j) {
      const float w = j <= i ? want[j] : 0.0f, wd = j <= i ? want_ds[j] : 0.0f;
      differ += std::memcmp(&p[i * t + j], &w, sizeof w) != 0;
      differ += std::memcmp(&again[i * t + j], &w, sizeof w) != 0;
      differ += std::memcmp(&ds[i * t + j], &wd, sizeof wd) != 0;
    }
  }
  EXPECT_EQ(differ, 0) << "softmax entries that differ from the row softmax's";
}

// Shapes: every row a masked tail (T 13, Dh 5: heads packed); rows of whole vectors and tails, the
// softmax's 8-row blocks and a tail block, heads read in place (T 41, Dh 16 and 32).
TEST(CpuAttention, TheBackwardRecomputesTheForwardsProbabilitiesInTheStoredFormat) {
  for (const char* name : {"cpu", "reference", "cuda-sim"}) {
    for (const ProbsShape& sh : {ProbsShape{2, 13, 2, 5}, ProbsShape{1, 41, 2, 16}, ProbsShape{1, 41, 1, 32}}) {
      SCOPED_TRACE(fmt::format("{} T {} Dh {}", name, sh.t, sh.dh));
      expect_backward_sees_forward_probs(backend(name), sh);
    }
  }
}

}  // namespace
}  // namespace normlab
