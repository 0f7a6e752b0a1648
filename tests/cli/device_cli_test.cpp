// --device: where no GPU is usable, every command that takes --device cuda exits 2 with one
// "no CUDA device found" line and creates nothing; bad values are usage errors. With a GPU
// (the CUDA module, the binary's, finds one), the no-device test is skipped.
#include <gtest/gtest.h>

#include <filesystem>

#include "normlab/cuda.h"
#include "test_util.h"

using namespace normlab::test;
namespace fs = std::filesystem;

namespace {

// --version does not load the CUDA module; this process loads the one the binary would.
bool binary_sees_a_gpu() { return normlab::cuda_device_count() > 0; }

TEST(DeviceCli, NoGpuIsExitTwoWithOneLineEverywhere) {
  if (binary_sees_a_gpu()) GTEST_SKIP() << "a CUDA device is present: this checks machines without one";
  const fs::path dir = fs::temp_directory_path() / "normlab_device_cli_test";
  fs::remove_all(dir);
  const std::vector<std::vector<std::string>> commands = {
      {"train", "--device", "cuda", "--steps", "2", "--out", (dir / "run").string()},
      {"sweep", "--device", "cuda", "--out", (dir / "sweep").string(), "lr=1e-3", "--set", "steps=2"},
      {"gradcheck", "--device", "cuda", "--op", "gelu"},
      {"gradcheck", "--backend", "cuda", "--op", "gelu"},
      {"bench", "norms", "--device", "cuda", "--shapes", "1x2x8"},
  };
  for (const auto& args : commands) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_NE(r.err.find("no CUDA device found"), std::string::npos) << describe(r);
    EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  }
  EXPECT_FALSE(fs::exists(dir / "run"));
  EXPECT_FALSE(fs::exists(dir / "sweep"));
  fs::remove_all(dir);
}

TEST(DeviceCli, BadDeviceValuesAreUsageErrors) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"train", "--device", "gpu", "--steps", "2"},
           {"train", "--tf32", "--steps", "2"},
           {"bench", "norms", "--dtypes", "bf16", "--shapes", "1x2x8"}}) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  }
}

}  // namespace
