// `normlab bench` as a user runs it: norms with --json and --compare, the resident and add+norm
// rows, step's FMA peak and GFLOP/s, and its errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "normlab/kinds.h"
#include "test_util.h"

using normlab::test::describe;
using normlab::test::run_cli;

namespace {

// The norms besides none, LayerNorm and RMSNorm: each has one backend row per pass in bench norms.
size_t other_norms() { return normlab::kind_values<normlab::NormKind>().size() - 3; }

}  // namespace

TEST(BenchCli, NormsJsonAndCompare) {
  const std::string base = testing::TempDir() + "/normlab_bench_base.json";
  auto r = run_cli({"bench", "norms", "--shapes", "2x4x32", "--threads", "1", "--footprint-mib", "1", "--min-time",
                    "0", "--repeats", "2", "--warmup", "1", "--impl", "fused,onednn", "--json", "--out", base});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  // Copy rows, the fused implementations (LayerNorm's, RMSNorm's and every other norm's: the
  // backend's) and oneDNN x fwd, bwd, LayerNorm's and RMSNorm's add+norm rows; --shapes alone: no
  // resident rows. Each norm row has its own copy beside it.
  EXPECT_EQ(j["benchmarks"].size(), 2u + 2 * ((3u + other_norms()) * 2u + 2u));
  for (const auto& b : j["benchmarks"]) EXPECT_FALSE(b["resident"].get<bool>()) << b["name"];
  r = run_cli({"bench", "norms", "--shapes", "2x4x32", "--threads", "1", "--footprint-mib", "1", "--min-time", "0",
               "--repeats", "2", "--impl", "rmsnorm.fused", "--compare", base});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("rmsnorm.fused"), std::string::npos);
  EXPECT_NE(r.out.find("now/base"), std::string::npos) << r.out;
  r = run_cli({"bench", "--compare", base, base});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("same"), std::string::npos) << r.out;
  r = run_cli({"bench", "merge", base, base, "--markdown"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("| layernorm.fused |"), std::string::npos) << r.out;
  // --out refuses an existing file unless --force, and --force replaces a bench
  // document, even the merge's own input (a person's file never: the catalogue).
  const std::string before = normlab::test::slurp(base);
  r = run_cli({"bench", "merge", base, base, "--out", base});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
  EXPECT_EQ(normlab::test::slurp(base), before);
  r = run_cli({"bench", "merge", base, base, "--out", base, "--force", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(normlab::test::slurp(base), before);
  EXPECT_EQ(nlohmann::json::parse(normlab::test::slurp(base)), nlohmann::json::parse(r.out));
  // The merged document names each run (what scripts/bench_report.py prints per run).
  j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("runs")) << r.out.substr(0, 300);
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& run : j["runs"])
    for (const char* key : {"date", "normlab_commit", "others_cpu", "thread_round_trip_ns", "kernel_choices"})
      EXPECT_TRUE(run.contains(key)) << key;
  // A norms base against a step run matches no row: an error before anything is timed.
  r = run_cli({"bench", "step", "--model", "toy", "--layers", "1", "--compare", base});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("`bench norms` document"), std::string::npos) << describe(r);
  EXPECT_TRUE(r.out.empty()) << describe(r);
  std::remove(base.c_str());
}

TEST(BenchCli, ResidentAndAddNormRows) {
  auto r = run_cli({"bench", "norms", "--resident-shapes", "1x64x32", "--threads", "1", "--min-time", "0",
                    "--repeats", "2", "--warmup", "1", "--impl", "fused,unfused", "--pass", "addfwd", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["benchmarks"].size(), 2u + 2 * 4u);  // --resident-shapes alone: no memory-bound rows; own copies
  for (const auto& b : j["benchmarks"]) {
    EXPECT_TRUE(b["resident"].get<bool>()) << b["name"];
    EXPECT_NE(b["name"].get<std::string>().find("/1x64x32/resident/"), std::string::npos) << b["name"];
    EXPECT_EQ(b["status"], "ok") << b["name"];
    if (b["impl"] == "fused") {
      EXPECT_TRUE(b["counters"]["vs_unfused"].is_number()) << b["name"];
      EXPECT_TRUE(b["counters"]["pct_of_own_copy"].is_number()) << b["name"];
    }
  }
  r = run_cli({"bench", "norms", "--resident-shapes", "default", "--shapes", "1x4x32", "--footprint-mib", "1",
               "--threads", "1", "--min-time", "0", "--repeats", "2", "--impl", "rmsnorm.fused", "--pass", "fwd"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  for (const char* want : {"memory-bound shapes", "cache-resident, the training step's shapes", "1x512x64",
                           "1x512x256", "of their own copy on the same reused buffers"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
}

// --pass's words are spelled in any case, like the passes' own names (ALL was refused, FWD taken).
TEST(BenchCli, PassWordsInAnyCase) {
  for (const char* pass : {"ALL", "Both", "FWD,bwd"}) {
    auto r = run_cli({"bench", "norms", "--shapes", "1x4x32", "--resident-shapes", "1x4x32", "--threads", "1",
                      "--min-time", "0", "--repeats", "1", "--warmup", "0", "--impl", "rmsnorm.fused", "--pass", pass});
    ASSERT_EQ(r.exit_code, 0) << pass << "\n" << describe(r);
    EXPECT_NE(r.out.find("bwd"), std::string::npos) << pass << "\n" << r.out;
  }
}

TEST(BenchCli, StepPrintsTheFmaPeakAndGflops) {
  const std::vector<std::string> args = {"bench",  "step", "--model", "toy", "--layers", "2",   "--d-model",
                                         "16",     "--d-hidden", "32", "--vocab", "16",  "--batch",  "2",
                                         "--seq",  "4",    "--threads", "1", "--min-time", "0", "--repeats",
                                         "1",      "--warmup", "0"};
  auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("FMA peak (float32, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("%FMA peak"), std::string::npos) << r.out;
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  r = run_cli(json_args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["context"]["fma_peak"].size(), 1u);
  EXPECT_GT(j["context"]["fma_peak"][0]["gflop_per_s"].get<double>(), 0);
  for (const auto& b : j["benchmarks"]) {
    EXPECT_EQ(b["counters"]["matmul_flops"].get<double>(), 135168.0);  // by hand: bench_test.cpp MatmulFlopsByHand
    EXPECT_GT(b["counters"]["pct_of_fma_peak"].get<double>(), 0);
  }
}

// bench ops: the op cases' perf mode. Every selected case is checked, then timed; its row names the
// case's line, which selects it again; --out and --compare take ops documents, merge refuses them.
TEST(BenchCli, OpsOnCpuAndCudaSimTimeCheckedCasesSelectedByTheirLines) {
  const std::string base = testing::TempDir() + "/normlab_bench_ops.json";
  std::remove(base.c_str());
  auto r = run_cli({"bench", "ops", "rmsnorm_fwd", "channel_scale", "--min-time", "0", "--repeats", "2", "--warmup",
                    "0", "--json", "--out", base});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["context"]["normlab_bench"], "ops");
  // 14 shapes of rmsnorm_fwd, 28 of each channel_scale kernel (a vector and a scalar lambda).
  ASSERT_EQ(j["benchmarks"].size(), 14u + 2u * 28u);
  for (const auto& b : j["benchmarks"]) {
    EXPECT_EQ(b["status"], "ok") << b["name"];
    EXPECT_EQ(b["backend"], "cpu") << b["name"];
    EXPECT_GT(b["real_time"].get<double>(), 0.0) << b["name"];
    EXPECT_GT(b["bytes"].get<int64_t>(), 0) << b["name"];
    EXPECT_NE(b["verify"].get<std::string>().find("max |diff|"), std::string::npos) << b["name"];
  }
  const std::string line = j["benchmarks"][6]["case"];
  r = run_cli({"bench", "ops", line, "--min-time", "0", "--repeats", "1", "--device", "cuda-sim", "--compare", base});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find(line), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cuda-sim"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("now/base"), std::string::npos) << r.out;
  r = run_cli({"bench", "--compare", base, base});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("same"), std::string::npos) << r.out;
  r = run_cli({"bench", "merge", base, base});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("not merged"), std::string::npos) << describe(r);
  r = run_cli({"bench", "ops", "--list", "layernorm_bwd"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(normlab::test::split_lines(r.out).size(), 14u) << r.out;
  std::remove(base.c_str());
}

// A norm's case of any size, rotated through copies of its tensors: 1 MiB of sets of a 32 KiB
// case (rows 16 x d 256: x, y, rstd and gamma) is 32 sets, each checked case's row says so.
TEST(BenchCli, OpsTimeANormAtAnySizeRotatedThroughAFootprint) {
  auto r = run_cli({"bench", "ops", "layernorm_fwd rows=16 d=256", "rmsnorm_bwd rows=5 d=4097 seed=3", "--min-time", "0",
                    "--repeats", "2", "--warmup", "1", "--footprint-mib", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["benchmarks"].size(), 2u);
  const auto& ln = j["benchmarks"][0];  // lines made to order run in the order given
  EXPECT_EQ(ln["case"], "layernorm_fwd rows=16 d=256 eps=1e-05 seed=0");
  EXPECT_EQ(ln["status"], "ok");
  const int64_t bytes = ln["bytes"];
  EXPECT_EQ(bytes, 4 * (2 * 16 * 256 + 2 * 16 + 2 * 256));  // x, y; mean, rstd; gamma, beta
  EXPECT_EQ(ln["sets"].get<int64_t>(), ((int64_t{1} << 20) + bytes - 1) / bytes);
  EXPECT_EQ(j["benchmarks"][1]["case"], "rmsnorm_bwd rows=5 d=4097 eps=1e-06 seed=3");
  r = run_cli({"bench", "ops", "dyt_bwd rows=3 d=70", "--min-time", "0", "--repeats", "1"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("     1 "), std::string::npos) << r.out;  // one resident set without --footprint-mib
}

TEST(BenchCli, BadInputIsOneLineAndExitTwo) {
  for (std::vector<std::string> args : {std::vector<std::string>{"bench", "norms", "--shapes", "0x4x8"},
                                        {"bench", "norms", "--shapes", "4x-2x8"},
                                        {"bench", "norms", "--shapes", "four"},
                                        {"bench", "norms", "--shapes", "4096x4096x4096"},
                                        {"bench", "norms", "--shapes", "4x8x8,"},
                                        {"bench", "norms", "--impl", "cudnn"},
                                        {"bench", "norms", "--pass", "sideways"},
                                        {"bench", "norms", "--pass", "fwd,,bwd"},
                                        {"bench", "norms", "--impl", "onednn", "--pass", "addfwd"},
                                        {"bench", "norms", "--impl", "unfused", "--pass", "fwd,bwd"},
                                        {"bench", "norms", "--resident-shapes", "1x0x64"},
                                        {"bench", "norms", "--resident-shapes", "1x512x64,"},
                                        {"bench", "norms", "--threads", "0"},
                                        {"bench", "norms", "--repeats", "0"},
                                        {"bench", "norms", "--json", "--csv"},
                                        {"bench", "norms", "--compare", "/nonexistent/base.json"},
                                        {"bench", "step", "--model", "bert"},
                                        {"bench", "step", "--layers", "0"},
                                        {"bench", "--compare", "/nonexistent/a.json", "/nonexistent/b.json"},
                                        {"bench", "norms", "--frobnicate"},
                                        {"bench", "ops", "rmsnorm_fwd rows=7 d=64 eps=1e-3"},
                                        {"bench", "ops", "rmsnorm_fwd rows=7"},
                                        {"bench", "ops", "rmsnorm_fwd rows=0 d=64"},
                                        {"bench", "ops", "rmsnorm_fwd rows=7 d=64 seed"},
                                        {"bench", "ops", "softmax_fwd rows=7 d=64"},
                                        {"bench", "ops", "--footprint-mib", "-1"},
                                        {"bench", "ops", "softmax_fwd_nosuch"},
                                        {"bench", "ops", "--device", "gpu"},
                                        {"bench", "ops", "--device", "cuda-sim", "--threads", "2"},
                                        {"bench", "ops", "--min-time", "-1"}}) {
    auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_TRUE(r.out.empty()) << describe(r);
    EXPECT_EQ(normlab::test::split_lines(r.err).size(), 1u) << describe(r);
  }
}

// A shape whose one buffer set fits in memory but whose row check (float64 copies of the row's
// arrays) does not is refused before anything is allocated, not killed for memory half way: under
// a 3 GB address-space limit, 16x1024x1024 needs 256 MiB for its set and 2 GiB for a check. An
// AddressSanitizer build reserves terabytes of shadow address space, which the limit forbids.
TEST(BenchCli, NormsRefuseAShapeWhoseCheckCannotFitInMemory) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "an address-space limit and AddressSanitizer's shadow memory exclude each other";
#endif
  const char* bin = std::getenv("NORMLAB_TEST_BINARY");
  const std::vector<std::string> argv = {"-c", "ulimit -v 3000000 && exec \"$0\" \"$@\"", bin && *bin ? bin : NORMLAB_BINARY,
                                         "bench", "norms", "--shapes", "16x1024x1024", "--threads", "1"};
  const auto r = normlab::test::run_program("/bin/sh", argv);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_EQ(normlab::test::split_lines(r.err).size(), 1u) << describe(r);
  EXPECT_NE(r.err.find("float64 check"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("too large for memory"), std::string::npos) << describe(r);
}

// bench norms on cuda-sim (the CUDA sources simulated on the host): the GPU bench's whole path
// without a GPU. Its rows pass the same check as the cpu rows (every kernel, f32, bf16 and fp16, the
// vector path at d = 64 and the scalar one at d = 67; DyT and Derf in f32, their alpha and shift
// gradients checked), and they are ordinary `bench norms` rows: --out, --compare, `bench merge`
// and `bench --compare` take them. ctest label: cuda.
TEST(BenchCudaSim, RowsPassTheCheckAndEveryToolTakesThem) {
  const std::string base = testing::TempDir() + "/normlab_bench_cuda_sim.json";
  std::remove(base.c_str());
  const std::vector<std::string> run = {"bench", "norms", "--device", "cuda-sim", "--shapes", "1x8x64,1x3x67",
                                        "--precision", "fp32,bf16,fp16", "--footprint-mib", "1", "--min-time", "0",
                                        "--repeats", "2", "--warmup", "1"};
  std::vector<std::string> args = run;
  args.insert(args.end(), {"--json", "--out", base});
  auto r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j, nlohmann::json::parse(normlab::test::slurp(base)));
  EXPECT_EQ(j["context"]["normlab_bench"], "norms");
  EXPECT_EQ(j["context"]["device"].get<std::string>().rfind("cuda-sim: ", 0), 0u) << j["context"];
  // Per shape: f32 copy.loop, copy.memcpy, both norms' fwd, bwd, addfwd and every other norm's
  // fwd, bwd; bf16 and fp16 both norms' fwd, bwd (no addfwd in 16 bits, no other norm).
  ASSERT_EQ(j["benchmarks"].size(), 2u * (2u + 6u + 2u * other_norms() + 4u + 4u));
  size_t other_rows = 0;
  for (const auto& b : j["benchmarks"]) {
    const std::string name = b["name"];
    EXPECT_EQ(b["status"], "ok") << name << ": " << b["verify"]["report"];
    EXPECT_TRUE(b["verify"]["pass"].get<bool>()) << name;
    EXPECT_EQ(b["device"], "cuda-sim") << name;
    EXPECT_GT(b["aggregates"]["median"].get<double>(), 0.0) << name;
    EXPECT_EQ(name.substr(name.size() - 9), "/cuda-sim") << name;
    const int64_t nd = b["shape"][0].get<int64_t>() * b["shape"][1].get<int64_t>() * b["shape"][2].get<int64_t>();
    if (b["pass"] == "fwd") {
      EXPECT_EQ(b["counters"]["data_bytes"], 2 * nd * (b["dtype"] == "f32" ? 4 : 2)) << name;
    }
    if (b["norm"] != "copy") {
      EXPECT_EQ(b["provider"], "normlab (cuda-sim)") << name;
    }
    if (b["norm"] != "copy" && b["norm"] != "layernorm" && b["norm"] != "rmsnorm") {
      ++other_rows;
      EXPECT_EQ(b["dtype"], "f32") << name;
      EXPECT_NE(b["pass"], "addfwd") << name;
    }
  }
  EXPECT_EQ(other_rows, 2 * 2 * other_norms());
  r = run_cli({"bench", "--compare", base, base});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("rmsnorm.fused/bwd/1x3x67/bf16/cuda-sim"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("derf.fused/bwd/1x3x67/cuda-sim"), std::string::npos) << r.out;
  r = run_cli({"bench", "merge", base, base});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_EQ(r.out.rfind("device: cuda-sim: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("layernorm.fused"), std::string::npos) << r.out;
  // DyT's and Derf's speed against RMSNorm's, the same run on the same device (the DyT paper's
  // claim is about GPUs).
  EXPECT_NE(r.out.find("DyT speed vs RMS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Derf speed vs RMS"), std::string::npos) << r.out;
  // A second run compared with the first, its document replacing the first's only with --force.
  args = {"bench", "norms", "--device", "cuda-sim", "--shapes", "1x8x64,1x3x67", "--dtypes", "bf16", "--pass", "fwd",
          "--footprint-mib", "1", "--min-time", "0", "--repeats", "2", "--compare", base, "--out", base};
  r = run_cli(args);
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  args.push_back("--force");
  r = run_cli(args);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("now/base"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("only in base"), std::string::npos) << r.out;
  EXPECT_EQ(nlohmann::json::parse(normlab::test::slurp(base))["benchmarks"].size(), 2u * (2u + 2u));
  std::remove(base.c_str());

  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"bench", "norms", "--device", "cuda-sim", "--resident-shapes", "1x8x64"},
        {"bench", "norms", "--device", "cuda-sim", "--impl", "fused"},
        {"bench", "norms", "--device", "cuda-sim", "--dtypes", "bf16", "--pass", "addfwd"},
        {"bench", "norms", "--device", "cuda-sim", "--dtypes", "f16"},
        {"bench", "norms", "--precision", "fp16", "--pass", "addfwd"},
        {"bench", "norms", "--device", "cuda-sim", "--tf32"}}) {
    r = run_cli(bad);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_EQ(normlab::test::split_lines(r.err).size(), 1u) << describe(r);
  }
}
