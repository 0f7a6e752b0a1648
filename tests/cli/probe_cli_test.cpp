// `normlab probe` as a user runs it: presets, config flags, JSON, and its errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"

using normlab::test::describe;
using normlab::test::run_cli;
using normlab::test::split_lines;

TEST(ProbeCli, PrelnGrowthJsonParses) {
  auto r = run_cli({"probe", "preln-growth", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["command"], "probe");
  EXPECT_EQ(j["preset"], "preln-growth");
  EXPECT_EQ(j["seeds"], 3);
  const auto& runs = j["preln_growth"]["runs"];
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["layers"].size(), 12u);
  EXPECT_NEAR(runs[1]["final_norm"]["out_norm"]["mean"].get<double>(), 8.0, 0.08);
  EXPECT_GT(runs[1]["layers"][11]["act_norm"]["mean"].get<double>(), runs[1]["layers"][0]["act_norm"]["mean"].get<double>());
  EXPECT_TRUE(runs[1]["layers"][0]["act_norm"]["std"].is_number());
}

TEST(ProbeCli, PlainStackTableAndHelp) {
  auto r = run_cli({"probe", "plain-stack", "--seeds", "1", "--batch", "2"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("activation: none (linear)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sqrt(d) = 8.000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layernorm gain=2"), std::string::npos) << r.out;
  r = run_cli({"probe", "--help"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("normlab probe xiong2020"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--d_model"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("--lr"), std::string::npos) << r.out;  // training-only keys are not probe flags
}

TEST(ProbeCli, ConfigFlagsAndOtherPresets) {
  auto r = run_cli({"probe", "--model", "gpt", "--layers", "3", "--placement", "post", "--json", "--seeds", "1", "--batch", "2"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["preset"], "config");
  EXPECT_EQ(j["config"]["config"]["model"], "gpt");
  EXPECT_EQ(j["config"]["config"]["placement"], "post");
  EXPECT_EQ(j["config"]["layers"].size(), 3u);
  EXPECT_FALSE(j["config"]["final_norm_on"].get<bool>());
  r = run_cli({"probe", "config", "--residual", "false", "--layers", "2", "--json", "--seeds", "1", "--batch", "2"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["config"]["config"]["residual"].get<bool>());
  EXPECT_EQ(j["config"]["layers"][1]["identity_share"]["mean"].get<double>(), 0.0);
  r = run_cli({"probe", "xiong2020", "--depths", "2,3", "--seeds", "1", "--batch", "2"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("post L=3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Xiong et al. 2020 (Fig. 3)"), std::string::npos) << r.out;
  r = run_cli({"probe", "identity-share", "--seeds", "1", "--batch", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["identity_share"]["runs"][1]["layers"][0]["cosine"]["mean"].is_null());  // no identity term
}

// The residual switch has one name, the config key's: the text table labels the runs without it
// "no-residual", as probe's JSON labels and the config do (it said "no-res").
TEST(ProbeCli, IdentityShareLabelsRunsWithTheResidualKeysName) {
  auto r = run_cli({"probe", "identity-share", "--seeds", "1", "--batch", "2"});
  ASSERT_EQ(r.exit_code, 0) << describe(r);
  EXPECT_NE(r.out.find("pre no-residual"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("post no-residual"), std::string::npos) << r.out;
}

TEST(ProbeCli, BadInputIsOneLineAndExitTwo) {
  for (std::vector<std::string> args : {std::vector<std::string>{"probe", "nope"},
                                        {"probe", "config", "--layers", "x"},
                                        {"probe", "config", "--layers", "0"},
                                        {"probe", "config", "--norm", "batchnorm"},
                                        {"probe", "xiong2020", "--layers", "4"},
                                        {"probe", "config", "--seeds", "0"},
                                        {"probe", "config", "--config", "/nonexistent/probe.json"},
                                        {"probe", "plain-stack", "--activation", "relu"},
                                        {"probe", "config", "--residual", "maybe"},
                                        {"probe", "--gains", "0.5,x"},
                                        {"probe", "--frobnicate"}}) {
    auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << describe(r);
    EXPECT_TRUE(r.out.empty()) << describe(r);
    EXPECT_EQ(split_lines(r.err).size(), 1u) << describe(r);
    EXPECT_EQ(r.err.rfind("error:", 0), 0u) << describe(r);
  }
  auto r = run_cli({"probe", "nope"});
  EXPECT_NE(r.err.find("plain-stack, preln-growth, xiong2020, identity-share, batchnorm, all, config"), std::string::npos) << r.err;
}
