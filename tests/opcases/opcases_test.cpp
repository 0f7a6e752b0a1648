// Test mode of the op cases (normlab/opcases.h): every case of the registry on every backend this
// build has (reference, cpu, cuda-sim, and cuda where a GPU is present), each case's tensors
// resident on the backend's device and its outputs NaN-poisoned, against the reference backend in
// float64. One test per op and backend (OpCases.<op>/<backend>); a failure names its case's line,
// and
//   NORMLAB_OP_CASE='rmsnorm_fwd rows=7 d=65 eps=1e-06 seed=904' build/test_opcases --gtest_filter='OpCases.rmsnorm_fwd/cpu'
// runs that case alone. Run all: ctest -R OpCases
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpu_skip.h"
#include "normlab/backend.h"
#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"
#include "normlab/error.h"
#include "normlab/opcases.h"
#include "normlab/precision.h"

namespace normlab {
namespace {

// The line NORMLAB_OP_CASE names, and whether a case of that line ran.
const char* only_case() {
  const char* only = std::getenv("NORMLAB_OP_CASE");
  return only && *only ? only : nullptr;
}
bool g_only_case_ran = false;

// A mistyped NORMLAB_OP_CASE would otherwise run no case at all and pass.
class OnlyCaseRan : public ::testing::Environment {
 public:
  void TearDown() override {
    if (only_case() && !g_only_case_ran) ADD_FAILURE() << "NORMLAB_OP_CASE='" << only_case() << "' names no case that ran";
  }
};
const auto* const only_case_ran = ::testing::AddGlobalTestEnvironment(new OnlyCaseRan);

std::string test_name(std::string backend_name) {
  std::replace(backend_name.begin(), backend_name.end(), '-', '_');
  return backend_name;
}

class OpCaseTest : public ::testing::Test {
 public:
  OpCaseTest(std::string op, std::string backend_name) : op_(std::move(op)), backend_(std::move(backend_name)) {}
  void TestBody() override {
    if (backend_ == "cuda" && !test::gpu_available()) GPU_SKIP() << "the cuda kernels are not tested on this machine";
    // cuda-sim runs everywhere: a lookup that fails is a failure, never a skip.
    Backend& b = backend(backend_);
    int ran = 0;
    for (const opcases::OpCase& c : opcases::all_cases()) {
      if (c.op != op_ || (only_case() && c.line() != only_case())) continue;
      g_only_case_ran = true;
      ++ran;
      const std::string line = c.line() + " backend=" + backend_;
      try {
        const opcases::CaseCheck check = opcases::check_case(c, b);
        EXPECT_TRUE(check.pass) << line << check.report << "\n  reproduce: NORMLAB_OP_CASE='" << c.line()
                                << "' build/test_opcases --gtest_filter='OpCases." << op_ << "/" << test_name(backend_)
                                << "'";
      } catch (const std::exception& e) {
        ADD_FAILURE() << line << ": " << e.what();
      }
    }
    if (!only_case()) {
      EXPECT_GT(ran, 0) << op_ << " has no case";
    }
  }

 private:
  std::string op_, backend_;
};

// Registered before main runs the tests: one test per (op, backend).
const bool registered = [] {
  std::vector<std::string> backends = {"reference", "cpu", "cuda-sim"};
  if (cuda_built()) backends.push_back("cuda");
  for (const std::string& op : opcases::op_names())
    for (const std::string& b : backends)
      ::testing::RegisterTest("OpCases", (op + "/" + test_name(b)).c_str(), nullptr, nullptr, __FILE__, __LINE__,
                              [op, b]() -> ::testing::Test* { return new OpCaseTest(op, b); });
  return true;
}();

// A line of any size for the norms' ops: the registry's shapes made again are the registry's cases
// (line and inputs), and other sizes, odd ones included, pass the check on every backend.
TEST(OpCasesMadeToOrder, ReproduceTheRegistryAndPassAtOtherSizes) {
  const opcases::OpCase& made = opcases::find_case("rmsnorm_bwd rows=7 d=65 seed=904");
  const opcases::OpCase& have = opcases::find_case("rmsnorm_bwd rows=7 d=65 eps=1e-06 seed=904");
  EXPECT_EQ(made.line(), have.line());
  EXPECT_NE(&made, &have);
  const opcases::Tensors a = made.inputs(), b = have.inputs();
  ASSERT_EQ(a.items().size(), b.items().size());
  for (size_t i = 0; i < a.items().size(); ++i) {
    EXPECT_EQ(a.items()[i].first, b.items()[i].first);
    EXPECT_EQ(a.items()[i].second.to_vector(), b.items()[i].second.to_vector()) << a.items()[i].first;
  }
  std::vector<std::string> backends = {"cpu", "cuda-sim"};
  for (const std::string& op : opcases::sized_ops()) {
    const auto ops = opcases::op_names();
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
    for (const std::string& line : {op + " rows=33 d=130 seed=7", op + " d=17 rows=2"}) {
      const opcases::OpCase& c = opcases::find_case(line);
      for (const std::string& be : backends) {
        const opcases::CaseCheck check = opcases::check_case(c, backend(be));
        EXPECT_TRUE(check.pass) << c.line() << " on " << be << check.report;
      }
    }
  }
  EXPECT_THROW(opcases::find_case("rmsnorm_fwd rows=7 d=65 eps=0.1"), UsageError);
  EXPECT_THROW(opcases::find_case("rmsnorm_fwd rows=7 d=x"), UsageError);
  EXPECT_THROW(opcases::find_case("softmax_fwd rows=7 d=65"), UsageError);
  EXPECT_THROW(opcases::find_case("rmsnorm_fwd rows=4294967296 d=4294967296"), UsageError);  // 2^64 wraps to 0
}

// A product of any shape: the registry's shapes written whole or with the defaults left out are
// the registry's cases (line and inputs); other shapes, odd and with every flag, pass the check on
// every backend; a word matmul cases lack, a flag not 0 or 1 and a missing size are refused.
TEST(OpCasesMadeToOrder, ProductsOfAnyShape) {
  const opcases::OpCase& have = opcases::find_case("matmul batch=1 m=64 n=512 k=64 ta=0 tb=1 ab=1 bb=1 acc=0 seed=101");
  const opcases::OpCase& made = opcases::find_case("matmul m=64 k=64 n=512 tb=1 seed=101");
  EXPECT_EQ(made.line(), have.line());
  EXPECT_NE(&made, &have);
  const opcases::Tensors a = made.inputs(), b = have.inputs();
  ASSERT_EQ(a.items().size(), b.items().size());
  for (size_t i = 0; i < a.items().size(); ++i)
    EXPECT_EQ(a.items()[i].second.to_vector(), b.items()[i].second.to_vector()) << a.items()[i].first;
  EXPECT_EQ(opcases::find_case("matmul m=9 n=4 k=0 acc=1").line(),
            "matmul batch=1 m=9 n=4 k=0 ta=0 tb=0 ab=1 bb=1 acc=1 seed=0");
  for (const char* line : {"matmul m=37 n=19 k=130 tb=1 seed=3", "matmul batch=3 m=5 n=67 k=9 ta=1 bb=0 acc=1",
                           "matmul batch=2 m=1 n=33 k=257 tb=1 ab=0"}) {
    const opcases::OpCase& c = opcases::find_case(line);
    for (const char* be : {"cpu", "cuda-sim"}) {
      const opcases::CaseCheck check = opcases::check_case(c, backend(be));
      EXPECT_TRUE(check.pass) << c.line() << " on " << be << check.report;
    }
  }
  // A contraction far longer than the registry's (K = 1000), whose tolerance grows with K.
  for (const char* line : {"matmul m=64 n=64 k=32768", "matmul m=64 n=64 k=8192 ta=1 seed=4"}) {
    const opcases::CaseCheck check = opcases::check_case(opcases::find_case(line), backend("cpu"));
    EXPECT_TRUE(check.pass) << line << check.report;
  }
  for (const char* bad : {"matmul m=7 n=5", "matmul m=7 n=5 k=3 tb=2", "matmul m=7 n=5 k=3 rows=4",
                          "matmul m=0 n=5 k=3", "matmul m=7 n=5 k=3 tb", "matmul m=70000 n=70000 k=70000",
                          "matmul m=4294967296 n=4294967296 k=4294967296",
                          "matmul batch=4294967296 m=65536 n=65536 k=65536"})
    EXPECT_THROW(opcases::find_case(bad), UsageError) << bad;
}

// LayerNorm's and RMSNorm's kernels with their rows and parameters stored in bf16 or fp16 (bench
// norms --dtypes on a device): checked against the reference on the rounded inputs, the stored
// outputs allowed half the format's ulp more.
TEST(OpCasesStorage, NormsStoredIn16BitsPassOnCudaSim) {
  for (const char* op : {"layernorm_fwd", "layernorm_bwd", "rmsnorm_fwd", "rmsnorm_bwd"})
    for (const Precision p : {Precision::bf16, Precision::fp16}) {
      const opcases::OpCase& c = opcases::find_case(std::string(op) + " rows=37 d=257 seed=11");
      const opcases::CaseCheck check = opcases::check_case(c, backend("cuda-sim"), p);
      EXPECT_TRUE(check.pass) << c.line() << " in " << to_string(p) << check.report;
    }
  EXPECT_THROW(opcases::check_case(opcases::find_case("dyt_fwd rows=3 d=8"), backend("cuda-sim"), Precision::bf16),
               Error);
}

// The census cases hold what they claim to: from 1000 values on, overflows, underflows and
// non-finite values for both 16-bit formats (their inputs are the same whatever the format).
TEST(OpCasesInputs, CensusCasesHoldEveryEvent) {
  int checked = 0;
  for (const opcases::OpCase* c : opcases::select_cases({"format_census"})) {
    const Tensor x = c->inputs().at("x").to(DType::f32);
    if (x.numel() < 1000) continue;
    ++checked;
    for (const Precision p : {Precision::bf16, Precision::fp16}) {
      const FormatCensus s = format_census(p, x.data<float>(), x.numel());
      EXPECT_GT(s.overflow, 0) << c->line() << " in " << to_string(p);
      EXPECT_GT(s.underflow, 0) << c->line() << " in " << to_string(p);
      EXPECT_GT(s.nonfinite, 0) << c->line() << " in " << to_string(p);
    }
  }
  EXPECT_GT(checked, 0) << "no format_census case of 1000 values or more";
}

}  // namespace
}  // namespace normlab
