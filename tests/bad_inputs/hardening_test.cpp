// What the catalogue's one contract (exit 2, one line, nothing written) cannot express: limits
// set on the process (ulimit -v), several processes at once, a user who cannot write, clean
// answers where an internal error was, and output in the form asked for.
//   ./build/test_bad_inputs --gtest_filter='Hardening*'
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace fs = std::filesystem;
using normlab::test::CliResult;
using normlab::test::describe;
using normlab::test::expect_one_error_line;
using normlab::test::run_cli;
using normlab::test::run_program;
using normlab::test::RunOptions;
using normlab::test::slurp;
using normlab::test::split_lines;

namespace {

// normlab's arguments run by /bin/sh after `ulimit -v KIB` (the address-space limit, RLIMIT_AS).
CliResult run_with_address_limit(long kib, const std::vector<std::string>& args, const std::string& cwd) {
  std::string cmd = "ulimit -v " + std::to_string(kib) + "; exec '" + std::string(NORMLAB_BINARY) + "'";
  for (const std::string& a : args) cmd += " '" + a + "'";
  RunOptions o;
  o.cwd = cwd;
  o.timeout_s = 120;
  return run_program("/bin/sh", {"-c", cmd}, o);
}

std::vector<std::string> tiny_train(const std::string& out) {
  return {"train", "--steps", "2", "--eval_every", "1", "--layers", "1", "--d_model", "8", "--d_hidden", "8",
          "--batch_size", "2", "--threads", "1", "-q", "--out", out};
}

}  // namespace

// A model that needs more than the address-space limit leaves is refused up front, as one that
// needs more than the machine's memory is: never a std::bad_alloc halfway through.
TEST(HardeningMemory, TheAddressSpaceLimitIsPartOfTheBudget) {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer reserves terabytes of shadow address space before main: no program built
  // with it starts under a ulimit -v of gigabytes.
  GTEST_SKIP() << "a sanitized normlab cannot start under ulimit -v";
#endif
  const fs::path dir = normlab::test::fresh_dir("hardening_ulimit_v");
  fs::create_directories(dir);
  // About 2.5 GB of parameters, Adam state and activations: far below this machine's memory,
  // far above a 1.5 GiB address space.
  const CliResult r = run_with_address_limit(
      1536 * 1024, {"train", "--model", "gpt", "--layers", "8", "--d_model", "1024", "--d_hidden", "4096", "--heads", "8",
                    "--vocab", "50000", "--steps", "1", "--threads", "1", "--out", "big"},
      dir.string());
  expect_one_error_line(r, "address space the limit (ulimit -v) leaves");
  EXPECT_FALSE(fs::exists(dir / "big"));

  // plot profile --init probes the run's config at initialization: the same budget.
  ASSERT_EQ(run_cli(tiny_train((dir / "small").string())).exit_code, 0);
  nlohmann::json cfg = nlohmann::json::parse(slurp(dir / "small" / "config.json"));
  cfg["model"] = "gpt";
  cfg["layers"] = 8;
  cfg["d_model"] = 1024;
  cfg["d_hidden"] = 4096;
  cfg["heads"] = 8;
  cfg["vocab"] = 50000;
  std::ofstream(dir / "small" / "config.json") << cfg.dump(1) << "\n";
  const CliResult p = run_with_address_limit(1536 * 1024, {"plot", "profile", "small", "--init", "--out", "p.svg"}, dir.string());
  expect_one_error_line(p, "address space the limit (ulimit -v) leaves");
  EXPECT_FALSE(fs::exists(dir / "p.svg"));
  fs::remove_all(dir);
}

// gradcheck of a norm in 16 bits on cuda-sim stores activations natively (bf16 / f16 tensors):
// the upstream gradient is made in the output's format, and the check passes as on the cpu.
TEST(HardeningGradcheck, SixteenBitNormsOnCudaSimAreChecked) {
  for (const char* op : {"layernorm", "rmsnorm"})
    for (const char* p : {"fp16", "bf16"}) {
      const CliResult r = run_cli({"gradcheck", "--device", "cuda-sim", "--op", op, "--precision", p});
      EXPECT_EQ(r.exit_code, 0) << describe(r);
      EXPECT_NE(r.out.find("cuda-sim-" + std::string(p)), std::string::npos) << describe(r);
      EXPECT_NE(r.out.find("all gradients agree"), std::string::npos) << describe(r);
    }
}

// A resume takes its partial over by renaming it: one it could not write into is refused while
// it still has its name (as a user who cannot write there: root writes anywhere).
TEST(HardeningResume, AReadOnlyPartialKeepsItsName) {
  const fs::path dir = normlab::test::fresh_dir("hardening_resume_ro");
  fs::create_directories(dir);
  std::vector<std::string> args = tiny_train((dir / "r").string());
  args[2] = "1000000";  // --steps: stopped long before its end
  for (const char* a : {"--save_every", "2"}) args.push_back(a);
  // A run stopped after its first checkpoint: made by a SIGTERM at the first saved checkpoint.
  const std::string cmd = "'" + std::string(NORMLAB_BINARY) + "' " + [&] {
    std::string s;
    for (const std::string& a : args) s += "'" + a + "' ";
    return s;
  }() + "& pid=$!; i=0; while [ -z \"$(ls " + dir.string() + "/r.partial.*/checkpoints/*.state.safetensors 2>/dev/null)\" ]; do "
        "i=$((i+1)); [ $i -lt 6000 ] || break; sleep 0.01; done; kill -TERM $pid; wait $pid; exit 0";
  ASSERT_EQ(run_program("/bin/sh", {"-c", cmd}).exit_code, 0);
  std::string partial;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("r.partial.", 0) == 0) partial = e.path().string();
  ASSERT_FALSE(partial.empty()) << "no stopped run to resume";
  ::chmod(partial.c_str(), 0555);
  CliResult r;
  if (::geteuid() == 0) {
    ::chmod(dir.c_str(), 0777);
    r = run_program("/usr/bin/setpriv", {"--reuid=65534", "--regid=65534", "--clear-groups", NORMLAB_BINARY, "train",
                                         "--resume", partial});
  } else {
    r = run_cli({"train", "--resume", partial});
  }
  expect_one_error_line(r, "is not writable");
  EXPECT_TRUE(fs::is_directory(partial)) << "the partial was renamed: " << describe(r);
  ::chmod(partial.c_str(), 0755);
  fs::remove_all(dir);
}

// --json asks for one JSON document on stdout, from every command.
TEST(HardeningPlot, JsonSaysWhatWasDrawn) {
  const fs::path dir = normlab::test::fresh_dir("hardening_plot_json");
  fs::create_directories(dir);
  ASSERT_EQ(run_cli(tiny_train((dir / "r").string())).exit_code, 0);
  const CliResult r = run_cli({"plot", "heatmap", (dir / "r").string(), "--out", (dir / "h.svg").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plot"], "heatmap");
  EXPECT_EQ(j["field"], "stream_norm");
  EXPECT_EQ(j["out"], (dir / "h.svg").string());
  EXPECT_EQ(j["bytes"].get<size_t>(), fs::file_size(dir / "h.svg"));
  fs::remove_all(dir);
}

// A relative text:PATH is the file as seen from where the sweep was made: the spec records it
// absolute, so the sweep is summarized and reported from anywhere.
TEST(HardeningSweep, RelativeTextDataIsRecordedAbsolute) {
  const fs::path dir = normlab::test::fresh_dir("hardening_sweep_text");
  fs::create_directories(dir / "elsewhere");
  fs::copy_file(fs::path(NORMLAB_SOURCE_DIR) / "experiments" / "data" / "tiny.txt", dir / "t.txt");
  RunOptions in_dir;
  in_dir.cwd = dir.string();
  const CliResult r = run_cli({"sweep", "--out", "sw", "--set", "data=text:t.txt", "--set", "steps=2", "--set",
                               "eval_every=1", "--set", "layers=1", "--set", "d_model=8", "--set", "d_hidden=8", "--set",
                               "batch_size=2", "lr=1e-3,1e-2", "-q"},
                              in_dir);
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  const nlohmann::json spec = nlohmann::json::parse(slurp(dir / "sw" / "spec.json"));
  EXPECT_EQ(spec["base"]["data"], "text:" + (dir / "t.txt").string());
  RunOptions away;
  away.cwd = (dir / "elsewhere").string();
  const CliResult report = run_cli({"report", "../sw", "--out", "site", "-q"}, away);
  EXPECT_EQ(report.exit_code, 0) << describe(report);
  const CliResult status = run_cli({"sweep", "status", "../sw"}, away);
  EXPECT_EQ(status.exit_code, 0) << describe(status);
  fs::remove_all(dir);
}

// Every output path is checked before any work: a --tensorboard directory this user cannot write
// is refused before the sweep exists, not by each point's train (as a user who cannot write
// there: root writes anywhere).
TEST(HardeningSweep, AnUnwritableTensorboardDirectoryIsRefusedFirst) {
  const fs::path dir = normlab::test::fresh_dir("hardening_sweep_tb");
  fs::create_directories(dir / "ro");
  ::chmod(dir.c_str(), 0777);
  ::chmod((dir / "ro").c_str(), 0555);
  const std::vector<std::string> args = {"sweep", "--out", (dir / "sw").string(), "--tensorboard", (dir / "ro" / "tb").string(),
                                         "--set", "steps=2", "--set", "layers=1", "lr=1e-3,1e-2"};
  CliResult r;
  if (::geteuid() == 0) {
    std::vector<std::string> as_nobody = {"--reuid=65534", "--regid=65534", "--clear-groups", NORMLAB_BINARY};
    as_nobody.insert(as_nobody.end(), args.begin(), args.end());
    r = run_program("/usr/bin/setpriv", as_nobody);
  } else {
    r = run_cli(args);
  }
  expect_one_error_line(r, "is not writable");
  EXPECT_FALSE(fs::exists(dir / "sw")) << describe(r);
  EXPECT_FALSE(fs::exists(dir / "ro" / "tb")) << describe(r);
  ::chmod((dir / "ro").c_str(), 0755);
  fs::remove_all(dir);
}
