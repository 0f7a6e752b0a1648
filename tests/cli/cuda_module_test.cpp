// The CUDA backend is a module (libnormlab_cuda.so) loaded only for a command that asks for a
// CUDA device: what the dynamic loader reports opening (LD_DEBUG=files) for --version and a CPU
// run, and the one-line errors when the module is missing, of another build, or finds no GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"
#include "test_util.h"

using namespace normlab::test;
namespace fs = std::filesystem;

namespace {

// The child's stderr carries the dynamic loader's "file=<library> ..." lines for every library
// it opens, linked (NEEDED) or dlopen'ed.
CliResult run_traced(const std::vector<std::string>& args) {
  RunOptions o;
  o.env = {{"LD_DEBUG", "files"}};
  return run_cli(args, o);
}

bool opened_cuda(const CliResult& r) {
  return r.err.find("libcudart") != std::string::npos || r.err.find("libcublas") != std::string::npos ||
         r.err.find("libnormlab_cuda") != std::string::npos;
}

std::vector<std::string> train_args(const fs::path& out, const std::string& device) {
  return {"train", "--steps", "1", "--layers", "1", "--batch_size", "2", "--device", device, "--out", out.string(), "-q"};
}

TEST(CudaModule, VersionAndCpuRunsNeverOpenTheCudaLibraries) {
  const CliResult version = run_traced({"--version"});
  ASSERT_EQ(version.exit_code, 0) << describe(version);
  // The trace is there (a library normlab links), so its silence about CUDA means something.
  ASSERT_NE(version.err.find("libdnnl"), std::string::npos) << describe(version);
  EXPECT_FALSE(opened_cuda(version)) << describe(version);

  const fs::path dir = fresh_dir("cuda_module_cpu_run");
  const CliResult cpu = run_traced(train_args(dir, "cpu"));
  ASSERT_EQ(cpu.exit_code, 0) << describe(cpu);
  EXPECT_FALSE(opened_cuda(cpu)) << describe(cpu);
  fs::remove_all(dir);

  // And the same trace does show them once a CUDA device is asked for (exit 0 with a GPU, 2
  // without one).
  if (!normlab::cuda_built()) return;
  const CliResult cuda = run_traced(train_args(dir, "cuda"));
  EXPECT_NE(cuda.err.find("libnormlab_cuda"), std::string::npos) << describe(cuda);
  EXPECT_NE(cuda.err.find("libcudart"), std::string::npos) << describe(cuda);
  fs::remove_all(dir);
}

TEST(CudaModule, VersionSaysWhatWouldBeLoaded) {
  const CliResult r = run_cli({"--version"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  if (!normlab::cuda_built()) {
    EXPECT_NE(r.out.find("CUDA not built"), std::string::npos) << describe(r);
    return;
  }
  EXPECT_NE(r.out.find("module not loaded (it loads for --device cuda): "), std::string::npos) << describe(r);
  RunOptions missing;
  missing.env = {{"NORMLAB_CUDA_MODULE", "/no/such/dir/libnormlab_cuda.so"}};
  const CliResult m = run_cli({"--version"}, missing);
  ASSERT_EQ(m.exit_code, 0) << describe(m);
  EXPECT_NE(m.out.find("not available: the CUDA backend module /no/such/dir/libnormlab_cuda.so is missing"),
            std::string::npos)
      << describe(m);
}

TEST(CudaModule, AMissingModuleIsOneLineExitTwo) {
  if (!normlab::cuda_built()) GTEST_SKIP() << "this normlab is built without CUDA: there is no module to miss";
  const fs::path dir = fresh_dir("cuda_module_missing");
  RunOptions o;
  o.env = {{"NORMLAB_CUDA_MODULE", "/no/such/dir/libnormlab_cuda.so"}};
  const CliResult r = run_cli(train_args(dir, "cuda"), o);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  ASSERT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_EQ(r.err.rfind("error: no CUDA device found (", 0), 0u) << describe(r);
  EXPECT_NE(r.err.find("the CUDA backend module /no/such/dir/libnormlab_cuda.so cannot be loaded: "
                       "cannot open shared object file"),
            std::string::npos)
      << describe(r);
  EXPECT_FALSE(fs::exists(dir));
}

TEST(CudaModule, AModuleOfAnotherBuildIsRefused) {
#ifndef NORMLAB_TEST_OTHER_BUILD_MODULE
  GTEST_SKIP() << "this normlab is built without CUDA";
#else
  RunOptions o;
  o.env = {{"NORMLAB_CUDA_MODULE", NORMLAB_TEST_OTHER_BUILD_MODULE}};
  const CliResult r = run_cli({"gradcheck", "--device", "cuda", "--op", "gelu"}, o);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  ASSERT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_EQ(r.err.rfind("error: no CUDA device found (", 0), 0u) << describe(r);
  EXPECT_NE(r.err.find("is from another normlab build (0.0.1@000000000000+0123456789ab; this normlab is "),
            std::string::npos)
      << describe(r);
#endif
}

// The module is found next to the binary, loads, and its own device query answers (only the
// module knows the runtime's version).
TEST(CudaModule, WithoutAGpuTheLoadedModuleSaysNoDevice) {
  if (!normlab::cuda_built()) GTEST_SKIP() << "this normlab is built without CUDA";
  if (normlab::cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present: " << normlab::cuda_summary();
  const fs::path dir = fresh_dir("cuda_module_no_gpu");
  const CliResult r = run_cli(train_args(dir, "cuda"));
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  ASSERT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_EQ(r.err.rfind("error: no CUDA device found (CUDA built (runtime ", 0), 0u) << describe(r);
  EXPECT_FALSE(fs::exists(dir));
}

}  // namespace
