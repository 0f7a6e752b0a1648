// The kernels' size contract, stated once by each kernel (kernel.h) and checked by run_kernel for
// every backend: a tensor of the wrong size, an undefined one, or one on
// another device is an Error naming the backend, the kernel and the argument, before the backend's
// implementation runs. The cuda-sim rows run on the simulated device's tensors.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "normlab/backend.h"
#include "normlab/error.h"
#include "normlab/channel_scale_kernels.h"
#include "normlab/kernel.h"
#include "normlab/layernorm_kernels.h"
#include "normlab/matmul_kernels.h"
#include "normlab/rmsnorm_kernels.h"
#include "normlab/softmax_kernels.h"
#include "normlab/tensor.h"

namespace normlab {
namespace {

// The message of what f throws ("" when it throws nothing).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class KernelContract : public ::testing::TestWithParam<std::string> {
 protected:
  Backend& b() { return backend(GetParam()); }
  Tensor t(const Shape& s) { return Tensor::zeros(s, DType::f32, b().device()); }
};

TEST_P(KernelContract, AWrongSizeNamesTheKernelAndTheArgument) {
  Tensor y = t({4, 8}), mean = t({4}), rstd = t({4}), x = t({4, 8}), gamma = t({9}), beta = t({8});
  const std::string e = error_of([&] { run_kernel(b(), LayerNormForward{y, mean, rstd, x, gamma, beta, 4, 8, 1e-5}); });
  EXPECT_NE(e.find(b().name() + " layernorm_forward: gamma has shape (9,) (9 elements); the sizes imply 8"),
            std::string::npos)
      << e;
  Tensor dx = t({4, 8}), dy = t({4, 7});
  const std::string e2 = error_of([&] { run_kernel(b(), RmsNormBackward{&dx, nullptr, dy, x, beta, rstd, 4, 8}); });
  EXPECT_NE(e2.find("rmsnorm_backward: dy has shape (4, 7)"), std::string::npos) << e2;
  Tensor wrong_gradient = t({3});
  const std::string e3 =
      error_of([&] { run_kernel(b(), RmsNormBackward{&dx, &wrong_gradient, x, x, beta, rstd, 4, 8}); });
  EXPECT_NE(e3.find("rmsnorm_backward: dgamma has shape (3,)"), std::string::npos) << e3;
  Tensor c = t({6}), a = t({4}), bm = t({5});
  const std::string e4 = error_of([&] { run_kernel(b(), Matmul{c, a, bm, MatmulSpec::of(2, 3, 2)}); });
  EXPECT_NE(e4.find("matmul: b has shape (5,) (5 elements); the sizes imply 6"), std::string::npos) << e4;
}

TEST_P(KernelContract, AnUndefinedTensorOrAnotherDevicesIsRefused) {
  Tensor y = t({2, 3}), x = t({2, 3}), none;
  const std::string e = error_of([&] { run_kernel(b(), SoftmaxForward{y, none, 2, 3}); });
  EXPECT_NE(e.find("softmax_forward: x is an undefined tensor"), std::string::npos) << e;
  const Device other = b().device() == Device::cpu ? Device::cuda_sim : Device::cpu;
  backend("cuda-sim");  // its device memory exists once its module is loaded
  Tensor elsewhere = Tensor::zeros({2, 3}, DType::f32, other);
  const std::string e2 = error_of([&] { run_kernel(b(), SoftmaxForward{y, elsewhere, 2, 3}); });
  EXPECT_NE(e2.find(std::string("softmax_forward: x is on ") + device_name(other)), std::string::npos) << e2;
  // An optional input that is absent is no error; present, it is held to its size.
  Tensor lambda = t({2});
  const std::string e3 = error_of([&] { run_kernel(b(), ChannelScaleForward{y, x, lambda, 2, 3, 2}); });
  EXPECT_NE(e3.find("channel_scale_forward: lambda has 2 values, expected 3 (one per column) or 1"), std::string::npos)
      << e3;
}

// A kernel declared here (kernel.h) and implemented on the reference backend only.
struct NegateRows {
  static constexpr const char* kName = "negate_rows_test";
  Tensor& y;
  const Tensor& x;
  int64_t n;
  void check(const Contract& c) const { c.need(y, "y", n).need(x, "x", n); }
};
void negate(Backend&, const NegateRows& a) {
  for (int64_t i = 0; i < a.n; ++i) a.y.data<float>()[i] = -a.x.data<float>()[i];
}
NORMLAB_KERNEL(NegateRows, "reference", negate);

// A kernel an op declares is held to its own contract on every backend, before the backend's
// implementation is looked for.
TEST_P(KernelContract, ADeclaredKernelIsHeldToItsContract) {
  Tensor y = t({3}), x = t({4});
  const std::string e = error_of([&] { run_kernel(b(), NegateRows{y, x, 3}); });
  EXPECT_EQ(e.rfind(b().name() + " negate_rows_test: x has shape (4,) (4 elements); the sizes imply 3", 0), 0u) << e;
}

TEST(KernelRegistry, RunsTheBackendsImplementationAndNamesAMissingOne) {
  Tensor x = Tensor::from({1.0, -2.0, 3.0}, {3}), y = Tensor::zeros({3}, DType::f32);
  run_kernel(backend("reference"), NegateRows{y, x, 3});
  EXPECT_EQ(y.to_vector(), (std::vector<double>{-1.0, 2.0, -3.0}));
  EXPECT_FALSE(has_kernel("negate_rows_test", backend("cpu")));
  const std::string missing = error_of([&] { run_kernel(backend("cpu"), NegateRows{y, x, 3}); });
  EXPECT_EQ(missing.rfind("cpu negate_rows_test: the backend has no implementation of this kernel", 0), 0u) << missing;
  const std::string twice = error_of([&] { KernelRegistration<NegateRows>("reference", negate); });
  EXPECT_EQ(twice.rfind("kernel negate_rows_test has two implementations on backend reference", 0), 0u) << twice;
}

// What a module registers while it loads enters the registry only when its loader accepts it;
// a refused module's kernels are dropped, and a kernel a backend already has is refused at commit,
// outside dlopen, with nothing of the module added.
TEST(KernelRegistry, AModulesKernelsWaitForItsLoaderToAcceptIt) {
  const Backend& cpu = backend("cpu");
  {
    kernel_registry::ModuleLoad refused;
    KernelRegistration<NegateRows>("cpu", negate);
    EXPECT_FALSE(has_kernel("negate_rows_test", cpu));
  }
  EXPECT_FALSE(has_kernel("negate_rows_test", cpu));
  {
    kernel_registry::ModuleLoad twice;
    KernelRegistration<NegateRows>("cpu", negate);
    KernelRegistration<NegateRows>("reference", negate);  // the reference has it already
    const std::string e = error_of([&] { twice.commit(); });
    EXPECT_EQ(e.rfind("kernel negate_rows_test has two implementations on backend reference", 0), 0u) << e;
    EXPECT_FALSE(has_kernel("negate_rows_test", cpu));
  }
}

// Every kernel an op declares is implemented on every backend: a backend that forgot one is seen
// here, not at the first op that calls it (the reference's test kernel above aside).
TEST(KernelRegistry, EveryBackendImplementsTheSameKernels) {
  std::vector<std::string> reference = kernels_of(backend("reference"));
  reference.erase(std::remove(reference.begin(), reference.end(), "negate_rows_test"), reference.end());
  EXPECT_NE(std::find(reference.begin(), reference.end(), "rmsnorm_forward"), reference.end());
  EXPECT_EQ(kernels_of(backend("cpu")), reference);
  EXPECT_EQ(kernels_of(backend("cuda-sim")), reference);
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "cuda-sim" ? "cuda_sim" : info.param;
}
INSTANTIATE_TEST_SUITE_P(Backends, KernelContract, ::testing::Values("reference", "cpu", "cuda-sim"), param_name);

}  // namespace
}  // namespace normlab
