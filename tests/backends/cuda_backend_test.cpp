// Tests of the "cuda" backend beyond the op cases (tests/opcases, every kernel on every backend):
// what a machine without a GPU must say, and, with a GPU, transfers, the poison, bit-for-bit
// repeatability (no float atomics), the long-row paths of the norm kernels, and tensors on the
// device going through the ops' backend choice. GPU tests skip with a message when no device
// is present.
// Run: ctest -R Cuda
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "normlab/backend.h"
#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/layernorm_kernels.h"
#include "normlab/rmsnorm_kernels.h"
#include "normlab/rng.h"
#include "normlab/tensor.h"
#include "gpu_skip.h"

namespace normlab {
namespace {

bool have_cuda() {
  const std::vector<std::string> names = backend_names();
  return std::find(names.begin(), names.end(), "cuda") != names.end();
}

#define SKIP_WITHOUT_GPU()                  \
  do {                                      \
    if (!have_cuda()) {                     \
      GPU_SKIP() << "GPU test skipped";     \
    }                                       \
  } while (0)

Tensor randn(Rng& rng, const Shape& shape, double scale = 1.0, double mean = 0.0) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = mean + scale * rng.normal();
  return Tensor::from(v, shape, DType::f32);
}

double max_rel_diff(const Tensor& got, const Tensor& want) {
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  double m = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(g[i] - w[i]) / (1.0 + std::fabs(w[i]));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

TEST(CudaBackend, WithoutADeviceSaysSo) {
  if (have_cuda()) GTEST_SKIP() << "a CUDA device is present: " << cuda_summary();
  try {
    backend_for(Device::cuda, DType::f32);
    FAIL() << "backend_for(cuda) succeeded without a device";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device found"), std::string::npos) << e.what();
  }
  try {
    make_cuda_backend();
    FAIL() << "make_cuda_backend succeeded without a device";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device found"), std::string::npos) << e.what();
  }
}

// The module is opened by this test program as by the binary (both export normlab's symbols
// to it): a symbol it needs that the program lacks would skip every GPU test below as "no
// device". Its own summary names the runtime; the loader's names the toolkit.
TEST(CudaBackend, TheModuleLoadsIntoThisProgram) {
  if (!cuda_built()) GTEST_SKIP() << "this normlab is built without CUDA";
  cuda_device_count();
  const std::string summary = cuda_summary();
  EXPECT_EQ(summary.rfind("built (runtime ", 0), 0u) << summary;
}

// The tests below run on cuda-sim everywhere and on a real GPU where there is one.
class CudaDevice : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && !have_cuda()) {
      GPU_SKIP() << "GPU test skipped";
    }
    (void)backend(GetParam());  // made here: it installs the device's memory hooks
  }
  Device device() const { return GetParam() == "cuda" ? Device::cuda : Device::cuda_sim; }
  const std::string& name() const { return GetParam(); }
};

TEST_P(CudaDevice, TransfersRoundTripEveryDtype) {
  const Device dev = device();
  Tensor f = Tensor::from({1.5, -2.25, 3.0}, {3}, DType::f32);
  Tensor d = Tensor::from({1e300, -0.1}, {2}, DType::f64);
  Tensor i = Tensor::from_ids({7, -3, 2147483647}, {3});
  for (const Tensor* t : {&f, &d, &i}) {
    Tensor back = t->to_device(dev).to_device(Device::cpu);
    EXPECT_EQ(back.to_vector(), t->to_vector());
  }
  Tensor z = Tensor::zeros({5}, DType::f32, dev);
  EXPECT_EQ(z.to_device(Device::cpu).to_vector(), std::vector<double>(5, 0.0));
  // The device's fills of every dtype (fill_f64, fill_i32 kernels).
  EXPECT_EQ(Tensor::full_on({7}, -0.1, DType::f64, dev).to_device(Device::cpu).to_vector(), std::vector<double>(7, -0.1));
  EXPECT_EQ(Tensor::full_on({3}, -7, DType::i32, dev).to_device(Device::cpu).to_vector(), std::vector<double>(3, -7.0));
  Tensor c = Tensor::empty({5}, DType::f32, dev);
  c.copy_(Tensor::full_on({5}, 2.5, DType::f32, dev));
  EXPECT_EQ(c.to_device(Device::cpu).to_vector(), std::vector<double>(5, 2.5));
}

TEST_P(CudaDevice, NormsAreBitReproducibleAndLongRowsWork) {
  Backend& gpu = backend(name());
  Backend& ref = backend("reference");
  // Outputs on the device, poisoned with NaN: an element a kernel never writes stays NaN.
  const auto output = [dev = device()](const Shape& s) { return Tensor::full_on(s, NAN, DType::f32, dev); };
  // d = 30000 exceeds the shared-memory row cache of both the forward and the backward; 4096
  // rows of 768 exercise the column reduction's many chunks.
  const int64_t shapes[][2] = {{3, 30000}, {4096, 768}, {5, 12289}};
  uint64_t seed = 9000;
  for (const auto& s : shapes) {
    const int64_t n = s[0], d = s[1];
    Rng rng(seed++, stream::check);
    Tensor x = randn(rng, {n, d}, 2.0, 3.0), g = randn(rng, {d}, 0.2, 1.0), b = randn(rng, {d}, 0.2);
    Tensor dy = randn(rng, {n, d});
    const Tensor xd = x.to_device(device()), gd = g.to_device(device()), bd = b.to_device(device()),
                 dyd = dy.to_device(device());
    auto run = [&]() {
      Tensor y = output({n, d}), mean = output({n}), rstd = output({n});
      Tensor dx = output({n, d}), dg = output({d}), db = output({d});
      run_kernel(gpu, LayerNormForward{y, mean, rstd, xd, gd, bd, n, d, 1e-5});
      run_kernel(gpu, LayerNormBackward{&dx, &dg, &db, dyd, xd, gd, mean, rstd, n, d});
      std::vector<Tensor> host;
      for (const Tensor& t : {y, mean, rstd, dx, dg, db}) host.push_back(t.to_device(Device::cpu));
      return host;
    };
    std::vector<Tensor> one = run(), two = run();
    for (size_t i = 0; i < one.size(); ++i)
      EXPECT_EQ(one[i].to_vector(), two[i].to_vector()) << "output " << i << " changed between runs";
    Tensor y64 = Tensor::empty({n, d}, DType::f64), m64 = Tensor::empty({n}, DType::f64);
    Tensor r64 = Tensor::empty({n}, DType::f64), dx64 = Tensor::empty({n, d}, DType::f64);
    Tensor dg64 = Tensor::empty({d}, DType::f64), db64 = Tensor::empty({d}, DType::f64);
    run_kernel(ref, LayerNormForward{y64, m64, r64, x.to(DType::f64), g.to(DType::f64), b.to(DType::f64), n, d, 1e-5});
    run_kernel(ref, LayerNormBackward{&dx64, &dg64, &db64, dy.to(DType::f64), x.to(DType::f64), g.to(DType::f64),
                                      one[1].to(DType::f64), one[2].to(DType::f64), n, d});
    const std::string what = std::to_string(n) + "x" + std::to_string(d);
    EXPECT_LT(max_rel_diff(one[0], y64), 1e-4) << "y " << what;
    EXPECT_LT(max_rel_diff(one[3], dx64), 1e-4) << "dx " << what;
    EXPECT_LT(max_rel_diff(one[4], dg64), 1e-3) << "dgamma " << what;
    EXPECT_LT(max_rel_diff(one[5], db64), 1e-3) << "dbeta " << what;

    Tensor ry = output({n, d}), rr = output({n}), rdx = output({n, d}), rdg = output({d});
    run_kernel(gpu, RmsNormForward{ry, rr, xd, gd, n, d, 1e-6});
    run_kernel(gpu, RmsNormBackward{&rdx, &rdg, dyd, xd, gd, rr, n, d});
    Tensor ry64 = Tensor::empty({n, d}, DType::f64), rr64 = Tensor::empty({n}, DType::f64);
    Tensor rdx64 = Tensor::empty({n, d}, DType::f64), rdg64 = Tensor::empty({d}, DType::f64);
    run_kernel(ref, RmsNormForward{ry64, rr64, x.to(DType::f64), g.to(DType::f64), n, d, 1e-6});
    run_kernel(ref, RmsNormBackward{&rdx64, &rdg64, dy.to(DType::f64), x.to(DType::f64), g.to(DType::f64),
                                    rr.to_device(Device::cpu).to(DType::f64), n, d});
    EXPECT_LT(max_rel_diff(ry, ry64), 1e-4) << "rms y " << what;
    EXPECT_LT(max_rel_diff(rdx, rdx64), 1e-4) << "rms dx " << what;
    EXPECT_LT(max_rel_diff(rdg, rdg64), 1e-3) << "rms dgamma " << what;
  }
}

TEST_P(CudaDevice, DeviceTensorsGoToTheirBackend) {
  EXPECT_EQ(backend_for(device(), DType::f32).name(), name());
  EXPECT_THROW(backend_for(device(), DType::f64), Error);
  Backend& b = backend(name());
  Tensor x = Tensor::full({3}, 1.0).to_device(device());
  Tensor y = Tensor::empty({3}, DType::f32, device());
  run_kernel(b, Scale{y, x, -2.0});
  EXPECT_EQ(y.to_device(Device::cpu).to_vector(), std::vector<double>(3, -2.0));
  EXPECT_DOUBLE_EQ(sum_squares(b, y), 12.0);
  // A cpu tensor given to the cuda backend is an error naming the kernel, not a crash.
  Tensor host = Tensor::full({3}, 1.0);
  try {
    run_kernel(b, Scale{y, host, 1.0});
    FAIL() << "a cpu tensor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(name() + " scale"), std::string::npos) << e.what();
  }
  // A cuda-sim tensor is not a cuda tensor, and the reverse.
  if (name() == "cuda-sim") {
    try {
      Tensor other = Tensor::full({3}, 1.0).to_device(Device::cpu);
      run_kernel(b, Scale{y, other, 1.0});
      FAIL() << "a cpu tensor was accepted";
    } catch (const Error&) {
    }
  }
}

// Test names take letters, digits and underscores: "cuda-sim" is cuda_sim.
std::string device_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}
INSTANTIATE_TEST_SUITE_P(Devices, CudaDevice, ::testing::Values("cuda-sim", "cuda"), device_param_name);

}  // namespace
}  // namespace normlab
