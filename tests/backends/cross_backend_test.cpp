// Every kernel of every backend this build has ("cpu", "cuda-sim", and "cuda" when built) against
// the reference backend on the same random inputs: the result in float32, the reference computed
// in float64 on the inputs converted with to(f64), on odd shapes. A device backend runs behind a
// host adapter (host_adapter.h) that poisons every output with NaN on the device before each
// kernel, so that the same host-tensor test bodies check it; "cuda" skips with a message where no
// GPU is present, "cuda-sim" runs everywhere.
//
// One test per op and backend (KernelOps.<op>/<backend>), one case per shape, each named by a
// line as ggml's test-backend-ops names its cases:
//   rmsnorm_fwd rows=7 d=65 eps=1e-06 seed=904 backend=cpu
// Every failure message starts with that line, and
//   NORMLAB_KERNEL_CASE='rmsnorm_fwd rows=7 d=65 eps=1e-06 seed=904 backend=cpu' ./build/test_backends
//     --gtest_filter='*KernelOps.rmsnorm_fwd/cpu'    (one command line)
// runs that case alone (the inputs come from its seed). Run all: ctest -R KernelOps
//
// The kernels of the op-case registry (normlab/opcases.h: the norms, DyT, Derf, the channel scale)
// are tested by tests/opcases on tensors resident on each device; the kernels below move there op
// by op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "gpu_skip.h"
#include "host_adapter.h"
#include "kernel_check.h"
#include "normlab/backend.h"
#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"
#include "normlab/error.h"
#include "normlab/precision.h"
#include "normlab/reference_kernels.h"
#include "normlab/rng.h"
#include "normlab/tensor.h"

namespace normlab {
namespace {

using namespace kernel_check;

// ---- the backend under test -------------------------------------------------------------------

Backend* g_under_test = nullptr;
Backend& under_test() { return g_under_test ? *g_under_test : cpu_backend(); }

std::vector<std::string> built_backends() {
  std::vector<std::string> names = {"cpu", "cuda-sim"};
  if (cuda_built()) names.push_back("cuda");
  return names;
}

class KernelOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cpu") {
      g_under_test = &cpu_backend();
      return;
    }
    // cuda-sim runs everywhere: a lookup that fails is a failure, never a skip.
    if (GetParam() == "cuda" && !test::gpu_available()) {
      GPU_SKIP() << "the cuda kernels are not tested on this machine";
    }
    adapter_ = make_host_adapter(backend(GetParam()), /*poison_outputs=*/true);
    g_under_test = adapter_.get();
  }
  void TearDown() override { g_under_test = nullptr; }
  std::unique_ptr<Backend> adapter_;
};

// ---- a case: its line, and whether to run it --------------------------------------------------

// One parameter of a case, printed as key=value (doubles in %g: 1e-05, 1.68179).
struct Param {
  Param(const char* k, int64_t v) : key(k), value(std::to_string(v)) {}
  Param(const char* k, int v) : key(k), value(std::to_string(v)) {}
  Param(const char* k, uint64_t v) : key(k), value(std::to_string(v)) {}
  Param(const char* k, bool v) : key(k), value(v ? "1" : "0") {}
  Param(const char* k, const char* v) : key(k), value(v) {}
  Param(const char* k, double v) : key(k) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    value = buf;
  }
  std::string key, value;
};

// "op k=v ... backend=B": the case's name, the first words of each of its failure messages.
std::string kernel_case(const std::string& op, std::initializer_list<Param> params) {
  std::string s = op;
  for (const Param& p : params) s += " " + p.key + "=" + p.value;
  return s + " backend=" + ::testing::TestWithParam<std::string>::GetParam();
}

bool kernel_case_matched = false;

// False when NORMLAB_KERNEL_CASE names another case (then only that one runs).
bool selected(const std::string& c) {
  const char* only = std::getenv("NORMLAB_KERNEL_CASE");
  if (!only || !*only) return true;
  if (c != only) return false;
  std::printf("[ case     ] %s\n", c.c_str());
  kernel_case_matched = true;
  return true;
}

// A mistyped NORMLAB_KERNEL_CASE would otherwise run no case at all and pass.
class KernelCaseFilterMatched : public ::testing::Environment {
 public:
  void TearDown() override {
    const char* only = std::getenv("NORMLAB_KERNEL_CASE");
    if (only && *only && !kernel_case_matched) ADD_FAILURE() << "NORMLAB_KERNEL_CASE='" << only << "' names no case that ran";
  }
};
const auto* const kernel_case_filter = ::testing::AddGlobalTestEnvironment(new KernelCaseFilterMatched);

// ============================================================================
// matrix products
// ============================================================================

struct MatmulCase {
  int64_t batch, m, n, k;
  bool ta, tb, ab, bb, acc;
};

void check_matmul(const MatmulCase& c, uint64_t seed) {
  const std::string what = kernel_case("matmul", {{"batch", c.batch}, {"m", c.m}, {"n", c.n}, {"k", c.k},
                                                  {"ta", c.ta}, {"tb", c.tb}, {"ab", c.ab}, {"bb", c.bb},
                                                  {"acc", c.acc}, {"seed", seed}});
  if (!selected(what)) return;
  Rng rng(seed, stream::check);
  const int64_t na = (c.ab ? c.batch : 1), nb = (c.bb ? c.batch : 1);
  Tensor a = randn(rng, {na * c.m * c.k}), b = randn(rng, {nb * c.k * c.n});
  Tensor c32 = randn(rng, {c.batch * c.m * c.n});  // the initial C, used when accumulating
  Tensor c64 = f64(c32);
  under_test().matmul(c32, a, b, MatmulSpec{c.batch, c.m, c.n, c.k, c.ta, c.tb, c.ab, c.bb, c.acc});
  ref().matmul(c64, f64(a), f64(b), MatmulSpec{c.batch, c.m, c.n, c.k, c.ta, c.tb, c.ab, c.bb, c.acc});
  // Dot products of K float32 terms ~N(0,1): kForward up to K = 65 (see there); the K = 1000
  // cases get the reduction tolerance (measured 2.4e-5).
  expect_close(c32, c64, c.k > 100 ? kReduction : kForward, what);
}

// Every transpose, batch broadcast and accumulate combination on small shapes; then larger ones
// and a long contraction.
TEST_P(KernelOps, matmul) {
  const int64_t shapes[][4] = {{1, 1, 1, 1},  {1, 7, 5, 3},  {3, 7, 5, 3}, {2, 33, 17, 65},
                               {4, 1, 9, 16}, {2, 16, 1, 8}, {5, 8, 8, 1}};
  uint64_t seed = 1;
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (int ab = 0; ab < 2; ++ab)
          for (int bb = 0; bb < 2; ++bb)
            for (int acc = 0; acc < 2; ++acc)
              check_matmul({s[0], s[1], s[2], s[3], ta != 0, tb != 0, ab != 0, bb != 0, acc != 0}, seed++);
  check_matmul({1, 64, 512, 64, false, true, true, true, false}, 101);
  check_matmul({1, 64, 48, 1000, true, false, true, true, true}, 102);
  check_matmul({8, 31, 29, 37, false, false, true, false, false}, 103);  // folded into one GEMM
  check_matmul({8, 31, 29, 37, true, false, true, false, true}, 104);    // broadcast weights
  check_matmul({6, 31, 29, 37, false, true, false, true, false}, 105);   // broadcast A
}

TEST_P(KernelOps, matmul_empty_contraction) {
  for (int acc = 0; acc < 2; ++acc) {
    const std::string what = kernel_case("matmul_empty_contraction", {{"m", 2}, {"n", 3}, {"k", 0}, {"acc", acc}});
    if (!selected(what)) continue;
    // Accumulating keeps C, otherwise C becomes zero.
    Tensor c = Tensor::full({6}, 3.0), a = e32({0}), b = e32({0});
    under_test().matmul(c, a, b, MatmulSpec{1, 2, 3, 0, false, false, true, true, acc != 0});
    for (double v : c.to_vector()) EXPECT_EQ(v, acc ? 3.0 : 0.0) << what;
  }
}

TEST_P(KernelOps, linear_fwd) {
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 3, 5}, {64, 65, 1}, {33, 64, 128}, {512, 64, 64}};
  uint64_t seed = 200;
  for (const auto& s : shapes) {
    for (int with_bias = 0; with_bias < 2; ++with_bias) {
      const int64_t m = s[0], k = s[1], n = s[2];
      const uint64_t case_seed = seed++;
      const std::string what =
          kernel_case("linear_fwd", {{"m", m}, {"k", k}, {"n", n}, {"bias", with_bias}, {"seed", case_seed}});
      if (!selected(what)) continue;
      Rng rng(case_seed, stream::check);
      Tensor x = randn(rng, {m, k}), w = randn(rng, {n, k}), bias = randn(rng, {n});
      Tensor y = e32({m, n}), y64 = e64({m, n});
      Tensor no_bias;
      under_test().linear_forward(y, x, w, with_bias ? bias : no_bias, m, k, n);
      ref().linear_forward(y64, f64(x), f64(w), with_bias ? f64(bias) : no_bias, m, k, n);
      expect_close(y, y64, kForward, what);
    }
  }
}

// The epilogues: a residual added to the product, a gate multiplying the input gradient.
const int64_t kEpilogueShapes[][3] = {{1, 1, 1}, {7, 3, 5}, {64, 65, 1}, {33, 64, 128}, {512, 128, 64}};

TEST_P(KernelOps, linear_fwd_residual) {
  uint64_t seed = 250;
  for (const auto& s : kEpilogueShapes) {
    const int64_t m = s[0], k = s[1], n = s[2];
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("linear_fwd_residual", {{"m", m}, {"k", k}, {"n", n}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    Tensor x = randn(rng, {m, k}), w = randn(rng, {n, k}), bias = randn(rng, {n}), r = randn(rng, {m, n});
    Tensor y = e32({m, n}), y64 = e64({m, n});
    under_test().linear_forward(y, x, w, bias, r, m, k, n);
    ref().linear_forward(y64, f64(x), f64(w), f64(bias), f64(r), m, k, n);
    expect_close(y, y64, kForward, what);
  }
}

TEST_P(KernelOps, linear_bwd_input) {
  uint64_t seed = 250;
  for (const auto& s : kEpilogueShapes) {
    const int64_t m = s[0], k = s[1], n = s[2];
    const uint64_t case_seed = seed++;
    for (int gated = 0; gated < 2; ++gated) {
      const std::string what =
          kernel_case("linear_bwd_input", {{"m", m}, {"k", k}, {"n", n}, {"gated", gated}, {"seed", case_seed}});
      if (!selected(what)) continue;
      Rng rng(case_seed, stream::check);
      Tensor x = randn(rng, {m, k}), w = randn(rng, {n, k}), bias = randn(rng, {n}), r = randn(rng, {m, n});
      Tensor dy = randn(rng, {m, n}), gate = randn(rng, {m, k});
      Tensor dx = e32({m, k}), dx64 = e64({m, k});
      under_test().linear_backward_input(dx, dy, w, gated ? gate : Tensor(), m, k, n);
      ref().linear_backward_input(dx64, f64(dy), f64(w), gated ? f64(gate) : Tensor(), m, k, n);
      expect_close(dx, dx64, kForward, what);
    }
  }
}

TEST_P(KernelOps, sum_rows) {
  const int64_t shapes[][2] = {{1, 1}, {7, 3}, {7, 65}, {1, 1000}, {512, 64}, {64, 513}};
  uint64_t seed = 300;
  for (const auto& s : shapes) {
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("sum_rows", {{"rows", s[0]}, {"d", s[1]}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    Tensor x = randn(rng, {s[0], s[1]});
    Tensor out = e32({s[1]}), out64 = e64({s[1]});
    under_test().sum_rows(out, x, s[0], s[1]);
    ref().sum_rows(out64, f64(x), s[0], s[1]);
    // Up to 512 rows summed in float32 per column: the reduction tolerance.
    expect_close(out, out64, kReduction, what);
  }
}

// ============================================================================
// elementwise
// ============================================================================

const int64_t kElementCounts[] = {1, 3, 17, 65, 1000, 100003};  // the last one is threaded

// Two N(0, 1) vectors of each size from seeds 400, 401, ...: the inputs of every op below.
template <typename Check>
void for_each_elementwise_case(const char* op, Check check) {
  uint64_t seed = 400;
  for (int64_t n : kElementCounts) {
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case(op, {{"n", n}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    Tensor a = randn(rng, {n}), b = randn(rng, {n});
    check(what, n, a, b);
  }
}

TEST_P(KernelOps, fill) {
  for_each_elementwise_case("fill", [](const std::string& what, int64_t n, const Tensor&, const Tensor&) {
    Tensor out = e32({n}), out64 = e64({n});
    under_test().fill(out, 0.3);
    ref().fill(out64, 0.3);
    expect_close(out, out64, {0, 1e-7}, what);  // one rounding of 0.3 to float
  });
}

TEST_P(KernelOps, copy) {
  for_each_elementwise_case("copy", [](const std::string& what, int64_t n, const Tensor& a, const Tensor&) {
    Tensor out = e32({n});
    under_test().copy(out, a);
    expect_close(out, f64(a), {0, 0}, what);  // exact
  });
}

TEST_P(KernelOps, add) {
  for_each_elementwise_case("add", [](const std::string& what, int64_t n, const Tensor& a, const Tensor& b) {
    Tensor out = e32({n}), out64 = e64({n});
    under_test().add(out, a, b, 0.7, -1.3);
    ref().add(out64, f64(a), f64(b), 0.7, -1.3);
    expect_close(out, out64, kForward, what);
    Tensor alias = a.clone();  // out aliasing an input: each element is read before written
    under_test().add(alias, alias, b, 2.0, 1.0);
    ref().add(out64, f64(a), f64(b), 2.0, 1.0);
    expect_close(alias, out64, kForward, what + ": in place");
  });
}

TEST_P(KernelOps, accumulate) {
  for_each_elementwise_case("accumulate", [](const std::string& what, int64_t, const Tensor& a, const Tensor& b) {
    Tensor dst = a.clone(), dst64 = f64(a);
    under_test().accumulate(dst, b);
    ref().accumulate(dst64, f64(b));
    expect_close(dst, dst64, kForward, what);
  });
}

TEST_P(KernelOps, scale) {
  for_each_elementwise_case("scale", [](const std::string& what, int64_t n, const Tensor& a, const Tensor&) {
    Tensor out = e32({n}), out64 = e64({n});
    under_test().scale(out, a, -0.37);
    ref().scale(out64, f64(a), -0.37);
    expect_close(out, out64, kForward, what);
  });
}

// Rounding to bf16 / fp16 in place: bit for bit what core's round_to gives (the reference
// backend's loop), on the values where rounding can go wrong (every 3rd value of the format, the
// midpoints to the next one and the float32 values beside both), the overflow threshold,
// infinities, NaN and random values of every magnitude.
TEST_P(KernelOps, round_to_format) {
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    const std::string what = kernel_case("round_to_format", {{"format", to_string(p)}});
    if (!selected(what)) continue;
    std::vector<float> v;
    const float inf = std::numeric_limits<float>::infinity();
    for (uint32_t b = 0; b < 0x10000u; b += 3) {
      const float x = from_bits(p, static_cast<uint16_t>(b)), next = from_bits(p, static_cast<uint16_t>(b + 1));
      if (!std::isfinite(x)) continue;
      v.insert(v.end(), {x, std::nextafter(x, inf), std::nextafter(x, -inf)});
      if (std::isfinite(next) && std::signbit(next) == std::signbit(x)) {
        const float mid = static_cast<float>((double(x) + next) / 2);
        v.insert(v.end(), {mid, std::nextafter(mid, inf), std::nextafter(mid, -inf)});
      }
    }
    // The overflow ties: 65520 (fp16) and max + half an ulp in bf16 (bits 0x7f7f8000), and the
    // float32 values beside them.
    const float tie = static_cast<float>(format_info(p).max + ulp_at(p, format_info(p).max) / 2);
    for (float x : {65504.0f, 65520.0f, tie, std::nextafter(tie, 0.0f), std::nextafter(tie, inf), 1e30f, inf,
                    std::nanf(""), std::numeric_limits<float>::max()})
      v.insert(v.end(), {x, -x});
    Rng rng(41, stream::check);
    for (int i = 0; i < 4099; ++i) v.push_back(static_cast<float>(rng.normal() * std::ldexp(1.0, i % 60 - 30)));
    Tensor t = Tensor::empty({static_cast<int64_t>(v.size())});
    std::copy(v.begin(), v.end(), t.data<float>());
    Tensor want = t.clone();
    ref().round_to_format(want, p);
    under_test().round_to_format(t, p);
    int64_t differ = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const float a = t.data<float>()[i], b = want.data<float>()[i];
      const bool same = (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
      if (!same && ++differ <= 5) ADD_FAILURE() << what << ": round(" << v[i] << ") = " << a << ", want " << b;
    }
    EXPECT_EQ(differ, 0) << what << " (" << v.size() << " values)";
  }
}

// Equal float32 values, bit for bit (NaN equal to NaN, 0 and -0 apart).
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  int64_t differ = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float a = got.data<float>()[i], b = want.data<float>()[i];
    const bool same = (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
    if (!same && ++differ <= 5) ADD_FAILURE() << what << "[" << i << "] = " << a << ", want " << b;
  }
  EXPECT_EQ(differ, 0) << what;
}

TEST_P(KernelOps, composite_norm_forward) {
  // Rows of odd and long lengths, in both formats, LayerNorm and RMSNorm; inputs on the format's
  // grid (as stored activations are), with a large mean, tiny spreads and zero rows among them.
  for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{64}, int64_t{1001}}) {
    for (Precision p : {Precision::bf16, Precision::fp16}) {
      for (bool ln : {true, false}) {
        const std::string what = kernel_case("composite_norm_forward",
                                             {{"d", d}, {"format", to_string(p)}, {"norm", ln ? "layernorm" : "rmsnorm"}});
        if (!selected(what)) continue;
        const int64_t n = 7;
        Rng rng(47 + static_cast<uint64_t>(d), stream::check);
        Tensor x = Tensor::empty({n, d}), g = Tensor::empty({d}), b = Tensor::empty({d});
        for (int64_t i = 0; i < n; ++i) {
          const double scale = i == 0 ? 0.0 : std::ldexp(1.0, static_cast<int>(3 * i) - 12);
          const double offset = i == 3 ? 1000.0 : 0.0;
          for (int64_t j = 0; j < d; ++j)
            x.data<float>()[i * d + j] = round_to(p, static_cast<float>(offset + scale * rng.normal()));
        }
        // Row 5 all 1047 * 2^-15: in fp16 its mean square plus eps 1e-5 is a tie only when eps is
        // rounded to fp16 first (CompositeNormRow.EpsIsRoundedToTheFormatBeforeItIsAdded).
        for (int64_t j = 0; j < d; ++j) x.data<float>()[5 * d + j] = round_to(p, std::ldexp(1047.0f, -15));
        for (int64_t j = 0; j < d; ++j) {
          g.data<float>()[j] = round_to(p, static_cast<float>(1.0 + 0.1 * rng.normal()));
          b.data<float>()[j] = round_to(p, static_cast<float>(0.1 * rng.normal()));
        }
        Tensor y = Tensor::empty({n, d}), mean = Tensor::empty({n}), rstd = Tensor::empty({n});
        Tensor wy = Tensor::empty({n, d}), wmean = Tensor::empty({n}), wrstd = Tensor::empty({n});
        Tensor no_mean, no_wmean;
        for (double eps : {1e-5, 1e-12}) {
          if (ln) {
            ref().composite_norm_forward(wy, wmean, wrstd, x, g, b, n, d, eps, p);
            under_test().composite_norm_forward(y, mean, rstd, x, g, b, n, d, eps, p);
            expect_same_bits(mean, wmean, what + " mean");
          } else {
            ref().composite_norm_forward(wy, no_wmean, wrstd, x, g, Tensor(), n, d, eps, p);
            under_test().composite_norm_forward(y, no_mean, rstd, x, g, Tensor(), n, d, eps, p);
          }
          expect_same_bits(rstd, wrstd, what + " rstd");
          expect_same_bits(y, wy, what + " y");
        }
      }
    }
  }
}

TEST_P(KernelOps, composite_norm_backward) {
  // The forward's rows (rstd from 2^12 down, a large mean, a zero row) and a dy on the format's
  // grid, scaled as a loss scale scales it: dx, dgamma, dbeta bit for bit, overflows included.
  for (int64_t d : {int64_t{1}, int64_t{3}, int64_t{17}, int64_t{64}, int64_t{1001}}) {
    for (Precision p : {Precision::bf16, Precision::fp16}) {
      for (bool ln : {true, false}) {
        const std::string what = kernel_case(
            "composite_norm_backward", {{"d", d}, {"format", to_string(p)}, {"norm", ln ? "layernorm" : "rmsnorm"}});
        if (!selected(what)) continue;
        const int64_t n = 7;
        Rng rng(53 + static_cast<uint64_t>(d), stream::check);
        Tensor x = Tensor::empty({n, d}), dy = Tensor::empty({n, d}), g = Tensor::empty({d}), b = Tensor::empty({d});
        for (int64_t i = 0; i < n; ++i) {
          const double scale = i == 0 ? 0.0 : std::ldexp(1.0, static_cast<int>(3 * i) - 12);
          const double offset = i == 3 ? 1000.0 : 0.0;
          for (int64_t j = 0; j < d; ++j) {
            x.data<float>()[i * d + j] = round_to(p, static_cast<float>(offset + scale * rng.normal()));
            const double grad = std::ldexp(rng.normal(), static_cast<int>(i) - 3);
            dy.data<float>()[i * d + j] = round_to(p, static_cast<float>(grad));
          }
        }
        for (int64_t j = 0; j < d; ++j) {
          g.data<float>()[j] = round_to(p, static_cast<float>(1.0 + 0.1 * rng.normal()));
          b.data<float>()[j] = round_to(p, static_cast<float>(0.1 * rng.normal()));
        }
        Tensor y = Tensor::empty({n, d}), rstd = Tensor::empty({n}), mean = ln ? Tensor::empty({n}) : Tensor();
        ref().composite_norm_forward(y, mean, rstd, x, g, ln ? b : Tensor(), n, d, 1e-5, p);
        Tensor dx = Tensor::empty({n, d}), dg = Tensor::empty({d}), db = Tensor::empty({d});
        Tensor wdx = Tensor::empty({n, d}), wdg = Tensor::empty({d}), wdb = Tensor::empty({d});
        ref().composite_norm_backward(&wdx, &wdg, ln ? &wdb : nullptr, dy, x, g, mean, rstd, n, d, p, nullptr);
        under_test().composite_norm_backward(&dx, &dg, ln ? &db : nullptr, dy, x, g, mean, rstd, n, d, p, nullptr);
        expect_same_bits(dx, wdx, what + " dx");
        expect_same_bits(dg, wdg, what + " dgamma");
        if (ln) expect_same_bits(db, wdb, what + " dbeta");
      }
    }
  }
}

TEST_P(KernelOps, format_census) {
  // Sizes around the cpu kernel's 65536-value chunks; values with every kind of event: overflow
  // (and the ties beside it), underflow, subnormals, zeros of both signs, inf and NaN.
  const float inf = std::numeric_limits<float>::infinity();
  // The first ten hold an overflow, an underflow and a non-finite value for both formats.
  std::vector<float> special{65520.0f, std::numeric_limits<float>::max(), 1e-8f, 1e-42f, inf, std::nanf(""),
                             0.0f, -0.0f, 65504.0f, -inf, std::nextafter(65520.0f, 0.0f), 1e30f, 3e-8f, 6e-8f, 1e-40f};
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{65537}, int64_t{140001}}) {
    for (Precision p : {Precision::fp32, Precision::bf16, Precision::fp16}) {
      const std::string what = kernel_case("format_census", {{"format", to_string(p)}, {"n", n}});
      if (!selected(what)) continue;
      Rng rng(43 + static_cast<uint64_t>(n), stream::check);
      Tensor t = Tensor::empty({n});
      float* v = t.data<float>();
      for (int64_t i = 0; i < n; ++i) {
        v[i] = i % 97 == 5 ? special[static_cast<size_t>(i / 97) % special.size()]
                           : static_cast<float>(rng.normal() * std::ldexp(1.0, static_cast<int>(i % 90) - 45));
      }
      const FormatCensus want = format_census(p, v, n);
      const FormatCensus got = under_test().format_census(t, p);
      EXPECT_EQ(got.count, want.count) << what;
      EXPECT_EQ(got.nonfinite, want.nonfinite) << what;
      EXPECT_EQ(got.overflow, want.overflow) << what;
      EXPECT_EQ(got.underflow, want.underflow) << what;
      EXPECT_EQ(got.max_abs, want.max_abs) << what;
      if (n >= 1000 && p != Precision::fp32) {
        EXPECT_GT(want.overflow, 0) << what;  // the case exercises what it claims to
        EXPECT_GT(want.underflow, 0) << what;
        EXPECT_GT(want.nonfinite, 0) << what;
      }
    }
  }
}

TEST_P(KernelOps, mul) {
  for_each_elementwise_case("mul", [](const std::string& what, int64_t n, const Tensor& a, const Tensor& b) {
    Tensor out = e32({n}), out64 = e64({n});
    under_test().mul(out, a, b);
    ref().mul(out64, f64(a), f64(b));
    expect_close(out, out64, kForward, what);
  });
}

TEST_P(KernelOps, gelu) {
  uint64_t seed = 500;
  for (int64_t n : kElementCounts) {
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("gelu", {{"n", n}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    Tensor x = randn(rng, {n}, 2.0);
    Tensor y = e32({n}), y64 = e64({n}), dydx = e32({n}), dydx64 = e64({n}), y_only = e32({n});
    under_test().gelu_forward(y, &dydx, x);
    ref().gelu_forward(y64, &dydx64, f64(x));
    // Phi comes from A&S 7.1.26 (|error in erf| <= 1.5e-7, so <= 7.5e-8 in Phi) plus float
    // rounding, times |x| up to ~8 here: ~1e-6 at worst; 3e-6 leaves a margin.
    expect_close(y, y64, {3e-6, 1e-5}, what + ": y");
    // The same error in Phi plus exp's 2 ulp in the density term.
    expect_close(dydx, dydx64, {3e-6, 1e-5}, what + ": dydx");
    // Without the derivative: the same values, bit for bit (inference and training agree).
    under_test().gelu_forward(y_only, nullptr, x);
    EXPECT_EQ(y_only.to_vector(), y.to_vector()) << what << ": y with and without dydx";
  }
}

TEST_P(KernelOps, sum_squares) {
  uint64_t seed = 600;
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{65}, int64_t{1000}, int64_t{300007}}) {
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("sum_squares", {{"n", n}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    Tensor x = randn(rng, {n});
    // Both sum exactly the same float values in double: only the order of the additions
    // differs, ~1e-16 relative per addition.
    EXPECT_NEAR(under_test().sum_squares(x), ref().sum_squares(f64(x)), 1e-12 * double(n) + 1e-12) << what;
  }
  // 1e8 would be lost in float: (1e4)^2 + 1 + ... must keep the small terms.
  const std::string what = kernel_case("sum_squares", {{"n", 4}, {"values", "1e4,1,1,1"}});
  if (selected(what)) {
    Tensor big = Tensor::from({1e4, 1, 1, 1}, {4}, DType::f32);
    EXPECT_EQ(under_test().sum_squares(big), 1e8 + 3) << what;
  }
}

TEST_P(KernelOps, adam) {
  uint64_t seed = 700;
  for (int64_t n : {int64_t{1}, int64_t{65}, int64_t{100003}}) {
    for (int decoupled = 0; decoupled < 2; ++decoupled) {
      for (int64_t step : {int64_t{1}, int64_t{10}}) {
        const uint64_t case_seed = seed++;
        const std::string what = kernel_case(
            "adam", {{"n", n}, {"decoupled", decoupled}, {"step", step}, {"lr", 1e-2}, {"wd", 0.1}, {"seed", case_seed}});
        if (!selected(what)) continue;
        Rng rng(case_seed, stream::check);
        Tensor p = randn(rng, {n}), g = randn(rng, {n}), m = randn(rng, {n}, 0.1);
        Tensor v = randn(rng, {n}, 0.01);
        // v is a running mean of squares: non-negative.
        float* vp = v.data<float>();
        for (int64_t i = 0; i < n; ++i) vp[i] = std::fabs(vp[i]);
        Tensor p64 = f64(p), m64 = f64(m), v64 = f64(v);
        AdamParams hp;
        hp.lr = 1e-2;
        hp.weight_decay = 0.1;
        hp.decoupled = decoupled != 0;
        hp.step = step;
        under_test().adam_step(p, g, m, v, hp);
        ref().adam_step(p64, f64(g), m64, v64, hp);
        // m, v: two float roundings of O(1) values.
        expect_close(m, m64, kForward, what + ": m");
        expect_close(v, v64, kForward, what + ": v");
        // p moves by lr * O(1): float32 rounding of p itself (~6e-8) dominates.
        expect_close(p, p64, kForward, what + ": param");
      }
    }
  }
}

// ============================================================================
// softmax, loss
// ============================================================================

const int64_t kSoftmaxShapes[][2] = {{1, 1}, {1, 3}, {7, 1}, {7, 3}, {7, 65}, {7, 1000}, {64, 512}};

struct SoftmaxInputs {
  Tensor x, dy;
  SoftmaxInputs(int64_t n, int64_t d, uint64_t seed) {
    Rng rng(seed, stream::check);
    x = randn(rng, {n, d}, 3.0, 50.0);  // large logits: stability
    dy = randn(rng, {n, d});
  }
};

TEST_P(KernelOps, softmax_fwd) {
  uint64_t seed = 1400;
  for (const auto& s : kSoftmaxShapes) {
    const int64_t n = s[0], d = s[1];
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("softmax_fwd", {{"rows", n}, {"d", d}, {"seed", case_seed}});
    if (!selected(what)) continue;
    SoftmaxInputs in(n, d, case_seed);
    Tensor y = e32({n, d}), y64 = e64({n, d});
    under_test().softmax_forward(y, in.x, n, d);
    ref().softmax_forward(y64, f64(in.x), n, d);
    // exp to 2 ulp of arguments up to |x - max| ~ 20: relative 1e-6 of each probability.
    expect_close(y, y64, kForward, what);
  }
}

TEST_P(KernelOps, softmax_bwd) {
  uint64_t seed = 1400;
  for (const auto& s : kSoftmaxShapes) {
    const int64_t n = s[0], d = s[1];
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("softmax_bwd", {{"rows", n}, {"d", d}, {"seed", case_seed}});
    if (!selected(what)) continue;
    SoftmaxInputs in(n, d, case_seed);
    Tensor y = e32({n, d});
    under_test().softmax_forward(y, in.x, n, d);  // the saved output
    Tensor dx = e32({n, d}), dx64 = e64({n, d});
    under_test().softmax_backward(dx, in.dy, y, n, d);
    ref().softmax_backward(dx64, f64(in.dy), f64(y), n, d);
    expect_close(dx, dx64, kGradient, what);
  }
}

TEST_P(KernelOps, cross_entropy) {
  const int64_t shapes[][2] = {{1, 1}, {1, 3}, {7, 65}, {64, 512}, {512, 64}};
  uint64_t seed = 1500;
  for (const auto& s : shapes) {
    const int64_t n = s[0], v = s[1];
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("cross_entropy", {{"rows", n}, {"vocab", v}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    Tensor logits = randn(rng, {n, v}, 4.0, 30.0);
    std::vector<int32_t> tg(static_cast<size_t>(n));
    for (auto& t : tg) t = static_cast<int32_t>(rng.below(static_cast<uint32_t>(v)));
    Tensor targets = Tensor::from_ids(tg, {n});
    Tensor loss = e32({1}), probs = e32({n, v}), loss64 = e64({1}), probs64 = e64({n, v});
    under_test().cross_entropy_forward(loss, probs, logits, targets, n, v);
    ref().cross_entropy_forward(loss64, probs64, f64(logits), targets, n, v);
    // loss ~ log(V) + spread: float rounding of the logits' max (30 * 6e-8) dominates.
    expect_close(loss, loss64, {1e-5, 1e-5}, what + ": loss");
    expect_close(probs, probs64, kForward, what + ": probs");
    Tensor dloss = Tensor::from({0.75}, {1}, DType::f32);
    Tensor dl = e32({n, v}), dl64 = e64({n, v});
    under_test().cross_entropy_backward(dl, dloss, probs, targets, n, v);
    ref().cross_entropy_backward(dl64, f64(dloss), f64(probs), targets, n, v);
    expect_close(dl, dl64, kForward, what + ": dlogits");
  }
}

TEST_P(KernelOps, cross_entropy_rejects_targets_outside_the_vocabulary) {
  const std::string what = kernel_case("cross_entropy", {{"rows", 2}, {"vocab", 3}, {"targets", "0,3"}});
  if (!selected(what)) return;
  Tensor logits = e32({2, 3}), probs = e32({2, 3}), loss = e32({1});
  Tensor targets = Tensor::from_ids({0, 3}, {2});
  EXPECT_THROW(under_test().cross_entropy_forward(loss, probs, logits, targets, 2, 3), Error) << what;
}

// ============================================================================
// attention, prefix mean
// ============================================================================

TEST_P(KernelOps, attention) {
  const int64_t cases[][4] = {{1, 1, 1, 1},  {1, 5, 3, 8},  {2, 16, 4, 16}, {2, 5, 1, 3},
                              {3, 1, 4, 16}, {1, 16, 2, 1}, {2, 64, 4, 16}};
  uint64_t seed = 1600;
  for (const auto& c : cases) {
    const int64_t b = c[0], t = c[1], h = c[2], dh = c[3], ch = h * dh;
    const uint64_t case_seed = seed++;
    const std::string what =
        kernel_case("attention", {{"B", b}, {"T", t}, {"H", h}, {"Dh", dh}, {"seed", case_seed}});
    if (!selected(what)) continue;
    const double scale = 1.0 / std::sqrt(double(dh));
    Rng rng(case_seed, stream::check);
    Tensor q = randn(rng, {b, t, ch}), k = randn(rng, {b, t, ch}), v = randn(rng, {b, t, ch});
    Tensor dout = randn(rng, {b, t, ch});
    Tensor out = e32({b, t, ch}), probs = e32({b, h, t, t});
    Tensor out64 = e64({b, t, ch}), probs64 = e64({b, h, t, t});
    under_test().attention_forward(out, probs, q, k, v, b, t, h, dh, scale);
    ref().attention_forward(out64, probs64, f64(q), f64(k), f64(v), b, t, h, dh, scale);
    expect_close(out, out64, kForward, what + ": out");
    expect_close(probs, probs64, kForward, what + ": probs");
    // Backward from the reference's probs, so that only the backward is compared.
    Tensor p_ref = probs64.to(DType::f32);
    Tensor dq = e32({b, t, ch}), dk = e32({b, t, ch}), dv = e32({b, t, ch});
    Tensor dq64 = e64({b, t, ch}), dk64 = e64({b, t, ch}), dv64 = e64({b, t, ch});
    under_test().attention_backward(&dq, &dk, &dv, dout, q, k, v, p_ref, b, t, h, dh, scale);
    ref().attention_backward(&dq64, &dk64, &dv64, f64(dout), f64(q), f64(k), f64(v), probs64, b, t, h, dh, scale);
    expect_close(dq, dq64, kGradient, what + ": dq");
    expect_close(dk, dk64, kGradient, what + ": dk");
    expect_close(dv, dv64, kGradient, what + ": dv");
    // Gradient masks.
    Tensor dq_only = e32({b, t, ch}), dv_only = e32({b, t, ch}), dk_only = e32({b, t, ch});
    under_test().attention_backward(&dq_only, nullptr, nullptr, dout, q, k, v, p_ref, b, t, h, dh, scale);
    under_test().attention_backward(nullptr, &dk_only, nullptr, dout, q, k, v, p_ref, b, t, h, dh, scale);
    under_test().attention_backward(nullptr, nullptr, &dv_only, dout, q, k, v, p_ref, b, t, h, dh, scale);
    expect_close(dq_only, f64(dq), {0, 0}, what + ": dq alone");
    expect_close(dk_only, f64(dk), {0, 0}, what + ": dk alone");
    expect_close(dv_only, f64(dv), {0, 0}, what + ": dv alone");
  }
}

// The statistics of a log step, against the float64 reference: odd sizes, rows longer than a
// block, T = 1, large logits (the max must come out exactly, the entropy near 0).
TEST_P(KernelOps, attention_logit_stats) {
  const int64_t cases[][4] = {{1, 1, 1, 1}, {1, 5, 3, 8}, {2, 33, 2, 7}, {1, 300, 1, 4}, {2, 16, 4, 16}};
  uint64_t seed = 1650;
  for (const auto& c : cases) {
    const int64_t b = c[0], t = c[1], h = c[2], dh = c[3], ch = h * dh;
    const uint64_t case_seed = seed++;
    const std::string what =
        kernel_case("attention_logit_stats", {{"B", b}, {"T", t}, {"H", h}, {"Dh", dh}, {"seed", case_seed}});
    if (!selected(what)) continue;
    const double scale = 1.0 / std::sqrt(double(dh));
    Rng rng(case_seed, stream::check);
    Tensor q = randn(rng, {b, t, ch}, 3.0), k = randn(rng, {b, t, ch}, 3.0);
    Tensor mx = e32({b, h, t}), ent = e32({b, h, t}), mx64 = e64({b, h, t}), ent64 = e64({b, h, t});
    under_test().attention_logit_stats(mx, ent, q, k, b, t, h, dh, scale);
    ref().attention_logit_stats(mx64, ent64, f64(q), f64(k), b, t, h, dh, scale);
    expect_close(mx, mx64, {1e-6, 1e-6}, what + ": max_logit");
    expect_close(ent, ent64, {1e-6, 1e-6}, what + ": entropy");
  }
}

// Odd sizes, a row longer than a block, and an all-zero row (norm 0, not NaN).
TEST_P(KernelOps, row_norms) {
  const int64_t shapes[][2] = {{1, 1}, {3, 5}, {7, 129}, {64, 1000}, {2, 4097}};
  uint64_t seed = 1655;
  for (const auto& s : shapes) {
    const int64_t n = s[0], d = s[1];
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("row_norms", {{"rows", n}, {"d", d}, {"zero_row", n > 2}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    Tensor x = randn(rng, {n, d}, 2.0, 1.0);
    if (n > 2) {
      std::vector<double> v = x.to_vector();
      std::fill(v.begin() + d, v.begin() + 2 * d, 0.0);
      x = Tensor::from(v, {n, d}, DType::f32);
    }
    Tensor norms = e32({n}), norms64 = e64({n});
    under_test().row_norms(norms, x, n, d);
    ref().row_norms(norms64, f64(x), n, d);
    expect_close(norms, norms64, {1e-6, 1e-6}, what);
  }
}

TEST_P(KernelOps, prefix_mean) {
  const int64_t cases[][3] = {{1, 1, 1}, {1, 5, 3}, {2, 7, 65}, {3, 512, 64}, {2, 16, 200}};
  uint64_t seed = 1700;
  for (const auto& c : cases) {
    const int64_t b = c[0], t = c[1], ch = c[2];
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("prefix_mean", {{"B", b}, {"T", t}, {"C", ch}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    Tensor x = randn(rng, {b, t, ch}), dy = randn(rng, {b, t, ch});
    Tensor y = e32({b, t, ch}), y64 = e64({b, t, ch});
    under_test().prefix_mean_forward(y, x, b, t, ch);
    ref().prefix_mean_forward(y64, f64(x), b, t, ch);
    // Sums in double, one rounding to float at the end.
    expect_close(y, y64, {1e-6, 1e-6}, what + ": y");
    Tensor dx = e32({b, t, ch}), dx64 = e64({b, t, ch});
    under_test().prefix_mean_backward(dx, dy, b, t, ch);
    ref().prefix_mean_backward(dx64, f64(dy), b, t, ch);
    expect_close(dx, dx64, {1e-6, 1e-6}, what + ": dx");
  }
}

// ============================================================================
// embedding, transpose
// ============================================================================

// Repeated ids: several rows of dy summed into one row of the table's gradient.
TEST_P(KernelOps, embedding) {
  const int64_t cases[][3] = {{1, 1, 1}, {7, 5, 3}, {64, 10, 65}, {512, 64, 64}};
  uint64_t seed = 1800;
  for (const auto& c : cases) {
    const int64_t n = c[0], v = c[1], d = c[2];
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("embedding", {{"N", n}, {"V", v}, {"D", d}, {"seed", case_seed}});
    if (!selected(what)) continue;
    Rng rng(case_seed, stream::check);
    std::vector<int32_t> idv(static_cast<size_t>(n));
    for (auto& id : idv) id = static_cast<int32_t>(rng.below(static_cast<uint32_t>(v)));
    Tensor ids = Tensor::from_ids(idv, {n});
    Tensor table = randn(rng, {v, d}), dy = randn(rng, {n, d});
    Tensor y = e32({n, d}), y64 = e64({n, d});
    under_test().embedding_forward(y, table, ids, n, v, d);
    ref().embedding_forward(y64, f64(table), ids, n, v, d);
    expect_close(y, y64, {0, 0}, what + ": y");                 // a copy: exact
    Tensor dt = Tensor::full({v, d}, 7.0), dt64 = e64({v, d});  // 7: must be overwritten
    under_test().embedding_backward(dt, dy, ids, n, v, d);
    ref().embedding_backward(dt64, f64(dy), ids, n, v, d);
    // Up to n/v ~ 8 rows summed per table row in float.
    expect_close(dt, dt64, kForward, what + ": dtable");
  }
}

TEST_P(KernelOps, embedding_rejects_ids_outside_the_table) {
  for (int id : {3, -1}) {
    const std::string what = kernel_case("embedding", {{"N", 1}, {"V", 3}, {"D", 2}, {"id", id}});
    if (!selected(what)) continue;
    Tensor y = e32({1, 2}), table = e32({3, 2});
    EXPECT_THROW(under_test().embedding_forward(y, table, Tensor::from_ids({id}, {1}), 1, 3, 2), Error) << what;
  }
}

// (outer, A, mid, Bdim, inner): heads split/merge (B, T, H, Dh) <-> (B, H, T, Dh), a plain
// matrix transpose, and odd sizes around the 32-wide tiles.
TEST_P(KernelOps, transpose) {
  const int64_t cases[][5] = {{1, 1, 1, 1, 1},   {2, 5, 1, 3, 8}, {1, 33, 1, 65, 1},
                              {2, 16, 1, 4, 16}, {3, 7, 2, 5, 3}, {1, 100, 3, 70, 1}};
  uint64_t seed = 1900;
  for (const auto& c : cases) {
    const uint64_t case_seed = seed++;
    const std::string what = kernel_case("transpose", {{"outer", c[0]}, {"A", c[1]}, {"mid", c[2]}, {"B", c[3]},
                                                       {"inner", c[4]}, {"seed", case_seed}});
    if (!selected(what)) continue;
    const int64_t total = c[0] * c[1] * c[2] * c[3] * c[4];
    Rng rng(case_seed, stream::check);
    Tensor x = randn(rng, {total});
    Tensor out = e32({total}), out64 = e64({total});
    under_test().transpose(out, x, c[0], c[1], c[2], c[3], c[4]);
    ref().transpose(out64, f64(x), c[0], c[1], c[2], c[3], c[4]);
    expect_close(out, out64, {0, 0}, what);
  }
}

// Test names take letters, digits and underscores: "cuda-sim" is cuda_sim.
std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}
INSTANTIATE_TEST_SUITE_P(Backends, KernelOps, ::testing::ValuesIn(built_backends()), param_name);

}  // namespace
}  // namespace normlab
