// `normlab gradcheck` as a user runs it: table, JSON, --list, --dump, bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

using normlab::test::describe;
using normlab::test::run_cli;

TEST(CliGradcheck, SelectedOpsPrintATableAndExitZero) {
  auto r = run_cli({"gradcheck", "--op", "layernorm", "--op", "block_post_ln"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("layernorm"), std::string::npos);
  EXPECT_NE(r.out.find("block.norm1.gamma"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cpu-f32"), std::string::npos);
  EXPECT_NE(r.out.find("4 checks, 0 failed"), std::string::npos) << r.out;
}

TEST(CliGradcheck, LowPrecisionChecksTheBackendInTheFormat) {
  auto r = run_cli({"gradcheck", "--op", "layernorm", "--op", "block_post_rms", "--precision", "fp16",
                    "--norm-compute", "format", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"], "fp16");
  EXPECT_EQ(j["norm_compute"], "format");
  EXPECT_DOUBLE_EQ(j["tolerance"]["fp16"]["rtol"].get<double>(), 16.0 / 1024);
  ASSERT_EQ(j["results"].size(), 4u);
  EXPECT_EQ(j["results"][1]["check"], "cpu-fp16");
}

TEST(CliGradcheck, JsonIsOneDocument) {
  auto r = run_cli({"gradcheck", "--op", "rmsnorm", "--json", "--shape", "3x7x65"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["pass"].get<bool>());
  ASSERT_EQ(j["results"].size(), 2u);
  EXPECT_EQ(j["results"][0]["inputs"][0]["shape"], nlohmann::json({3, 7, 65}));
}

TEST(CliGradcheck, ListAndDump) {
  auto r = run_cli({"gradcheck", "--list"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("toy_model_loss"), std::string::npos);
  std::string path = testing::TempDir() + "/normlab_dump_test.json";
  std::remove(path.c_str());
  r = run_cli({"gradcheck", "--op", "gelu", "--dump", path, "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  {
    std::ifstream in(path);
    auto j = nlohmann::json::parse(in);
    EXPECT_EQ(j["case"], "gelu");
  }
  // An existing file is refused without --force; --force replaces a dump (a person's
  // file never: the catalogue), through a temporary name.
  r = run_cli({"gradcheck", "--op", "add", "--dump", path, "-q"});
  EXPECT_EQ(r.exit_code, 2) << describe(r);
  EXPECT_NE(r.err.find("exists (use --force"), std::string::npos) << describe(r);
  r = run_cli({"gradcheck", "--op", "add", "--dump", path, "--force", "-q"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  std::ifstream in(path);
  EXPECT_EQ(nlohmann::json::parse(in)["case"], "add");
  for (const auto& e : std::filesystem::directory_iterator(testing::TempDir()))
    EXPECT_EQ(e.path().filename().string().find("normlab_dump_test.json.tmp"), std::string::npos) << e.path();
  std::remove(path.c_str());
}

TEST(CliGradcheck, BadInputIsOneLineAndExitTwo) {
  for (std::vector<std::string> args : {std::vector<std::string>{"gradcheck", "--op", "nope"},
                                        {"gradcheck", "--shape", "2x0x8"},
                                        {"gradcheck", "--backend", "tpu"},
                                        {"gradcheck", "--dump", "/nonexistent/dir/x.json", "--op", "gelu"},
                                        {"gradcheck", "--dump", "x.json"},
                                        {"gradcheck", "--frobnicate"},
                                        {"gradcheck", "--precision", "fp8"},
                                        {"gradcheck", "--norm-compute", "format"},
                                        {"gradcheck", "--precision", "bf16", "--backend", "none"}}) {
    auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_TRUE(r.out.empty()) << describe(r);
    EXPECT_EQ(normlab::test::split_lines(r.err).size(), 1u) << describe(r);
  }
}
