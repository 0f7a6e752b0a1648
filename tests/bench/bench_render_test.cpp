// `bench norms --list` as the bench library renders it.
#include <gtest/gtest.h>

#include <string>

#include "normlab/bench.h"

using namespace normlab::bench;

TEST(BenchRender, NormImplsListEveryImplementationThenPyTorchs) {
  const NormRegistry registry = builtin_norm_impls();
  const std::string text = render_norm_impls(registry);
  EXPECT_EQ(text.rfind("implementation         provider       what\n", 0), 0u) << text;
  for (const NormImpl& m : registry.all()) EXPECT_NE(text.find("\n" + m.name() + " "), std::string::npos) << m.name();
  EXPECT_NE(text.find("\nrmsnorm.torch          PyTorch        torch.nn.RMSNorm, with --with-torch\n"), std::string::npos)
      << text;
}
