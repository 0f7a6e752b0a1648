// --device: where no GPU is usable, every command that takes --device cuda exits 2 with one
// "no CUDA device found" line and creates nothing; bad values are usage errors. With a GPU
// (the CUDA module, the binary's, finds one), the no-device test is skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

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

// --device cuda-sim: the CUDA kernels under cuda-sim, on every machine. train (device-resident)
// ends where the cpu ends, to float32 rounding; a sweep point and gradcheck run there too.
TEST(DeviceCli, CudaSimTrainSweepAndGradcheck) {
  const fs::path dir = fresh_dir("device_cli_cuda_sim");
  fs::create_directories(dir);
  const std::vector<std::string> tiny = {"--model", "gpt", "--layers", "2", "--d_model", "32", "--d_hidden", "64",
                                         "--heads", "2", "--vocab", "32", "--seq_len", "8", "--batch_size", "4",
                                         "--steps", "6", "--eval_every", "3", "--eval_batches", "2", "--threads", "1"};
  auto train_args = [&](const std::string& device, const std::string& out) {
    std::vector<std::string> a = {"train", "--device", device, "--out", (dir / out).string(), "--json"};
    a.insert(a.end(), tiny.begin(), tiny.end());
    return a;
  };
  const CliResult cpu = run_cli(train_args("cpu", "cpu"));
  const CliResult sim = run_cli(train_args("cuda-sim", "sim"));
  ASSERT_EQ(cpu.exit_code, 0) << describe(cpu);
  ASSERT_EQ(sim.exit_code, 0) << describe(sim);
  const std::string cpu_result = slurp(dir / "cpu" / "result.json"), sim_result = slurp(dir / "sim" / "result.json");
  EXPECT_NE(sim_result.find("\"device\": \"cuda-sim ("), std::string::npos) << sim_result;
  auto final_val = [](const std::string& json) {
    const size_t at = json.find("\"final_val_loss\":");
    return at == std::string::npos ? -1.0 : std::stod(json.substr(at + 17));
  };
  const double a = final_val(cpu_result), b = final_val(sim_result);
  ASSERT_GT(a, 0) << cpu_result;
  EXPECT_NEAR(b, a, 1e-4 * a);
  EXPECT_TRUE(fs::exists(dir / "sim" / "model.safetensors"));

  CliResult sweep = run_cli({"sweep", "--device", "cuda-sim", "--out", (dir / "sweep").string(), "lr=1e-3",
                             "--set", "steps=2", "--set", "layers=1", "--set", "d_model=16", "--set", "d_hidden=32",
                             "--set", "batch_size=2", "--set", "eval_batches=1", "-q"});
  EXPECT_EQ(sweep.exit_code, 0) << describe(sweep);

  CliResult gc = run_cli({"gradcheck", "--device", "cuda-sim", "--op", "layernorm", "--op", "rmsnorm"});
  EXPECT_EQ(gc.exit_code, 0) << describe(gc);
  fs::remove_all(dir);
}

// The variants' ops, blocks and models (docs/variants.md) on cuda-sim's kernels: every gradient
// against float64 finite differences, as on the cpu.
TEST(DeviceCli, CudaSimGradcheckOfTheVariants) {
  std::vector<std::string> args = {"gradcheck", "--device", "cuda-sim", "--json"};
  for (const char* c : {"dyt", "derf", "channel_scale", "scalar_scale", "add_constant", "block_pre_dyt",
                        "block_post_derf", "block_rezero", "block_skipinit_rms", "block_ls_post_ln",
                        "block_postsub_rms", "block_ln_scaling", "attn_gemma_qknorm", "toy_mixln_loss",
                        "toy_peri_dyt_loss"}) {
    args.push_back("--op");
    args.push_back(c);
  }
  CliResult gc = run_cli(args);
  ASSERT_EQ(gc.exit_code, 0) << describe(gc);
  const nlohmann::json j = nlohmann::json::parse(gc.out);
  EXPECT_TRUE(j["pass"].get<bool>()) << gc.out;
  EXPECT_EQ(j["results"].size(), 30u) << gc.out;  // each case: float64 differences and the device's float32
}

// probe --device cuda-sim: the model probe with its parameters and batch on the device gives
// the cpu's numbers to float32 rounding (every number of the JSON report).
void expect_same_numbers(const nlohmann::json& a, const nlohmann::json& b, const std::string& path) {
  ASSERT_EQ(a.type(), b.type()) << path;
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      ASSERT_TRUE(b.contains(it.key())) << path << "." << it.key();
      expect_same_numbers(it.value(), b[it.key()], path + "." + it.key());
    }
  } else if (a.is_array()) {
    ASSERT_EQ(a.size(), b.size()) << path;
    for (size_t i = 0; i < a.size(); ++i) expect_same_numbers(a[i], b[i], path + "[" + std::to_string(i) + "]");
  } else if (a.is_number_float()) {
    const double x = a.get<double>(), y = b.get<double>();
    EXPECT_NEAR(y, x, 1e-6 + 1e-5 * std::abs(x)) << path;
  } else {
    EXPECT_EQ(a, b) << path;
  }
}

// The simulator's transfer counters as -v logs them at the end of a command on cuda-sim
// ("cuda-sim traffic: U uploads (B bytes), D downloads (E bytes)"): {B, E}, or {-1, -1} when no
// such line was logged (the command did not run on cuda-sim).
std::pair<double, double> cuda_sim_traffic(const std::string& err) {
  const std::string key = "cuda-sim traffic: ";
  const size_t at = err.find(key);
  if (at == std::string::npos) return {-1, -1};
  const size_t up = err.find('(', at), down = err.find('(', err.find("downloads", at));
  if (up == std::string::npos || down == std::string::npos) return {-1, -1};
  return {std::stod(err.substr(up + 1)), std::stod(err.substr(down + 1))};
}

// `probe ARGS --json` on the cpu and on cuda-sim: every number the same, and the cuda-sim run did
// run there: it uploaded at least every seed's token embedding (its parameters live on the
// device) and downloaded what it reports.
void expect_probe_on_cuda_sim_as_on_cpu(const std::vector<std::string>& args) {
  std::vector<std::string> sim_args = args;
  sim_args.insert(sim_args.begin() + 1, {"--device", "cuda-sim", "-v"});
  const CliResult cpu = run_cli(args), sim = run_cli(sim_args);
  ASSERT_EQ(cpu.exit_code, 0) << describe(cpu);
  ASSERT_EQ(sim.exit_code, 0) << describe(sim);
  const nlohmann::json c = nlohmann::json::parse(cpu.out);
  expect_same_numbers(c, nlohmann::json::parse(sim.out), "probe");
  const nlohmann::json& cfg = c["config"]["config"];
  // At least 2 bytes a value (bf16; float32 takes 4).
  const double embedding_bytes = cfg["vocab"].get<double>() * cfg["d_model"].get<double>() * 2;
  const auto [up, down] = cuda_sim_traffic(sim.err);
  EXPECT_GE(up, c["seeds"].get<double>() * embedding_bytes) << describe(sim);
  EXPECT_GT(down, 0) << describe(sim);
}

TEST(DeviceCli, CudaSimProbeMatchesTheCpu) {
  expect_probe_on_cuda_sim_as_on_cpu({"probe", "--layers", "2", "--d_model", "32", "--seeds", "2", "--batch", "4", "--json"});
}

// The same in bf16: on cuda-sim the probe's activations are stored natively (2-byte tensors) and
// its statistics read them; the cpu emulates the format in float32 (the same values).
TEST(DeviceCli, CudaSimProbeInBf16MatchesTheCpu) {
  expect_probe_on_cuda_sim_as_on_cpu({"probe", "--model", "gpt", "--precision", "bf16", "--layers", "2", "--d_model",
                                      "32", "--seeds", "1", "--batch", "4", "--json"});
}

TEST(DeviceCli, BadDeviceValuesAreUsageErrors) {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"train", "--device", "gpu", "--steps", "2"},
           {"train", "--tf32", "--steps", "2"},
           {"bench", "norms", "--precision", "f16", "--shapes", "1x2x8"}}) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
  }
}

}  // namespace
