// The kernels indexed by token ids reject an id outside the range (an error, never a read past the
// table), on every backend this build has (reference, cpu, cuda-sim, and cuda where a GPU is
// present), on tensors resident on the backend's device. No op case fits them (a case compares
// outputs), hence plain tests. Run: ctest -R OpCasesRejects
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gpu_skip.h"
#include "normlab/backend.h"
#include "normlab/cross_entropy_kernels.h"
#include "normlab/cuda_backend.h"
#include "normlab/embedding_kernels.h"
#include "normlab/error.h"
#include "normlab/tensor.h"

namespace normlab {
namespace {

std::vector<std::string> built_backends() {
  std::vector<std::string> names = {"reference", "cpu", "cuda-sim"};
  if (cuda_built()) names.push_back("cuda");
  return names;
}

class OpCasesRejects : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "cuda" && !test::gpu_available()) GPU_SKIP() << "the cuda kernels are not tested on this machine";
  }
  Backend& under_test() const { return backend(GetParam()); }
  Tensor on_device(const Tensor& t) const {
    const Device dev = under_test().device();
    return dev == Device::cpu ? t : t.to_device(dev);
  }
  Tensor zeros(const Shape& s) const { return Tensor::zeros(s, DType::f32, under_test().device()); }
};

TEST_P(OpCasesRejects, CrossEntropyTargetOutsideTheVocabulary) {
  Tensor loss = zeros({1}), probs = zeros({2, 3});
  const Tensor logits = zeros({2, 3}), targets = on_device(Tensor::from_ids({0, 3}, {2}));
  EXPECT_THROW(run_kernel(under_test(), CrossEntropyForward{loss, probs, logits, targets, 2, 3}), Error)
      << "targets 0,3 of 3";
}

TEST_P(OpCasesRejects, EmbeddingIdOutsideTheTable) {
  for (const int id : {3, -1}) {
    Tensor y = zeros({1, 2});
    const Tensor table = zeros({3, 2}), ids = on_device(Tensor::from_ids({id}, {1}));
    EXPECT_THROW(run_kernel(under_test(), EmbeddingForward{y, table, ids, 1, 3, 2}), Error) << "id " << id << " of 3";
  }
}

// Test names take letters, digits and underscores: "cuda-sim" is cuda_sim.
std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = info.param;
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}
INSTANTIATE_TEST_SUITE_P(Backends, OpCasesRejects, ::testing::ValuesIn(built_backends()), param_name);

}  // namespace
}  // namespace normlab
