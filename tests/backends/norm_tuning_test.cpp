// The choice of norm kernel variant per shape class (src/backends/cpu/norm_tuning.cpp): measured
// once and cached per CPU and build, NORMLAB_TUNE's three modes, the variables that force a
// choice, and what a bad value says.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "normlab/cpu_kernels.h"
#include "normlab/error.h"
#include "test_util.h"

namespace normlab {
namespace {

namespace fs = std::filesystem;
using cpu::NormKernel;
using cpu::NormVariant;
using test::fresh_dir;
using test::slurp;

// Sets (or unsets) environment variables for a test and restores them after it; the process's
// choices are forgotten on both ends, so that each test decides under its own environment.
class Env {
 public:
  Env& set(const std::string& name, const std::optional<std::string>& value) {
    if (!saved_.count(name)) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
    }
    value ? setenv(name.c_str(), value->c_str(), 1) : unsetenv(name.c_str());
    cpu::reset_norm_choices();
    return *this;
  }
  ~Env() {
    for (const auto& [name, value] : saved_) value ? setenv(name.c_str(), value->c_str(), 1) : unsetenv(name.c_str());
    cpu::reset_norm_choices();
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

nlohmann::json read_json(const fs::path& p) { return nlohmann::json::parse(slurp(p)); }

TEST(NormVariantNames, RoundTripAndBadNamesSayWhy) {
  for (const char* name : {"tiled-2048", "tiled-16+nt", "pipelined-pf0", "pipelined-pf4+nt", "onednn"})
    EXPECT_EQ(cpu::parse_norm_variant(name).name(), name);
  for (const char* bad : {"", "tiled", "tiled-", "tiled-x", "tiled-8", "pipelined-pf", "pipelined-pf999", "onednn+nt",
                          "fused", "tiled-2048+nt+nt"}) {
    try {
      cpu::parse_norm_variant(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("unknown norm kernel variant"), std::string::npos) << e.what();
    }
  }
}

// A fresh measurement times every candidate of the class, writes the cache, and the next process
// (here: the choices forgotten) takes the cached choice without timing anything.
TEST(NormTuning, MeasuresOnceThenUsesTheCache) {
  const fs::path dir = fresh_dir("norm_tuning_cache");
  Env env;
  env.set("XDG_CACHE_HOME", dir.string()).set("NORMLAB_TUNE", "fresh").set("NORMLAB_NORM_VARIANT", std::nullopt)
      .set("NORMLAB_STREAMING_STORES", std::nullopt);
  const fs::path file = dir / "normlab" / "kernel-choices.json";
  EXPECT_EQ(cpu::tune_cache_path(), file.string());
  const cpu::NormChoice measured = cpu::norm_choice(NormKernel::layernorm_forward, 96, 64);
  EXPECT_EQ(measured.source, "measured");
  EXPECT_EQ(measured.timed_rows, 96);
  // Tiles of three sizes, the pipeline, and oneDNN: every candidate timed, fastest first.
  ASSERT_GE(measured.times.size(), 5u);
  bool has_onednn = false;
  for (size_t i = 0; i < measured.times.size(); ++i) {
    EXPECT_GT(measured.times[i].seconds, 0.0);
    if (i > 0) {
      EXPECT_LE(measured.times[i - 1].seconds, measured.times[i].seconds);
    }
    has_onednn = has_onednn || measured.times[i].variant == "onednn";
  }
  EXPECT_TRUE(has_onednn);
  EXPECT_NE(measured.own.layout, NormVariant::Layout::onednn);
  // The same class again in the process: the same object, nothing timed again.
  EXPECT_EQ(&cpu::norm_choice(NormKernel::layernorm_forward, 100, 64), &cpu::norm_choice(NormKernel::layernorm_forward, 96, 64));

  ASSERT_TRUE(fs::exists(file));
  const nlohmann::json cache = read_json(file);
  const std::string key = measured.shape.key();
  ASSERT_TRUE(cache["choices"].contains(key)) << cache.dump(1);
  EXPECT_EQ(cache["choices"][key]["fused"], measured.own.name());
  EXPECT_EQ(cache["choices"][key]["best"], measured.best.name());

  env.set("NORMLAB_TUNE", "cached");
  const cpu::NormChoice& cached = cpu::norm_choice(NormKernel::layernorm_forward, 96, 64);
  EXPECT_EQ(cached.source, "cached");
  EXPECT_EQ(cached.own, measured.own);
  EXPECT_EQ(cached.best, measured.best);
  EXPECT_EQ(cached.times.size(), measured.times.size());
  // The process's list of choices says so (what result.json and the bench record).
  const std::vector<cpu::NormChoice> made = cpu::norm_choices_made();
  ASSERT_EQ(made.size(), 1u);
  EXPECT_EQ(made[0].shape.key(), key);

  // Another class is measured and added beside the first.
  EXPECT_EQ(cpu::norm_choice(NormKernel::rmsnorm_backward, 64, 32).source, "measured");
  EXPECT_EQ(read_json(file)["choices"].size(), 2u);
}

// A cache written on another CPU or by another build is ignored (and replaced), never trusted.
TEST(NormTuning, CacheOfAnotherCpuOrBuildIsIgnored) {
  const fs::path dir = fresh_dir("norm_tuning_other_cpu");
  Env env;
  env.set("XDG_CACHE_HOME", dir.string()).set("NORMLAB_TUNE", "cached").set("NORMLAB_NORM_VARIANT", std::nullopt);
  const cpu::NormChoice first = cpu::norm_choice(NormKernel::rmsnorm_forward, 64, 48);
  EXPECT_EQ(first.source, "measured");
  const fs::path file = dir / "normlab" / "kernel-choices.json";
  for (const char* field : {"cpu", "build"}) {
    nlohmann::json j = read_json(file);
    j[field] = std::string(j[field]) + " (elsewhere)";
    std::ofstream(file) << j.dump();
    env.set("NORMLAB_TUNE", "cached");
    EXPECT_EQ(cpu::norm_choice(NormKernel::rmsnorm_forward, 64, 48).source, "measured") << field;
  }
  // A file that is not JSON: ignored with a warning, measured, and replaced by a good one.
  std::ofstream(file) << "{ not json";
  env.set("NORMLAB_TUNE", "cached");
  EXPECT_EQ(cpu::norm_choice(NormKernel::rmsnorm_forward, 64, 48).source, "measured");
  EXPECT_NO_THROW(read_json(file));
}

// JSON of another shape (the choices a list, the file a list or a number, an entry a number) is
// a damaged cache like a non-JSON one: ignored with a warning, measured, rewritten whole.
TEST(NormTuning, ACacheOfTheWrongShapeIsIgnoredAndRewritten) {
  const fs::path dir = fresh_dir("norm_tuning_damaged");
  Env env;
  env.set("XDG_CACHE_HOME", dir.string()).set("NORMLAB_TUNE", "cached").set("NORMLAB_NORM_VARIANT", std::nullopt);
  ASSERT_EQ(cpu::norm_choice(NormKernel::rmsnorm_forward, 64, 40).source, "measured");
  const fs::path file = dir / "normlab" / "kernel-choices.json";
  const nlohmann::json good = read_json(file);
  const std::string key = good["choices"].begin().key();
  std::vector<nlohmann::json> damaged;
  for (const nlohmann::json& choices : {nlohmann::json::array({1, 2}), nlohmann::json("x"), nlohmann::json(nullptr),
                                         nlohmann::json{{key, 5}}, nlohmann::json{{key, {{"best", 7}}}}}) {
    nlohmann::json j = good;
    j["choices"] = choices;
    damaged.push_back(j);
  }
  damaged.push_back(nlohmann::json::array({1, 2}));
  damaged.push_back(nlohmann::json(3));
  for (const nlohmann::json& j : damaged) {
    std::ofstream(file) << j.dump();
    env.set("NORMLAB_TUNE", "cached");
    cpu::NormChoice ch;
    EXPECT_NO_THROW(ch = cpu::norm_choice(NormKernel::rmsnorm_forward, 64, 40)) << j.dump();
    EXPECT_EQ(ch.source, "measured") << j.dump();
    nlohmann::json now;
    ASSERT_NO_THROW(now = read_json(file)) << j.dump();
    EXPECT_TRUE(now["choices"].is_object() && now["choices"].contains(key)) << j.dump() << " became " << now.dump();
  }
}

// Processes measuring at once each keep their entries: every write merges under a lock.
TEST(NormTuning, ProcessesWritingAtOnceLoseNoEntry) {
  // Four trainings of four widths, each measuring its own norm classes, started together; a lost
  // update needs two writes to meet, so the race is run a few times over.
  for (int round = 0; round < 5; ++round) {
    const fs::path dir = fresh_dir("norm_tuning_concurrent_" + std::to_string(round));
    fs::create_directories(dir);
    std::string cmd;
    for (int d : {8, 16, 24, 32})
      cmd += fmt::format("'{}' train --steps 1 --eval_every 1 --layers 1 --d_model {} --d_hidden 8 --batch_size 2 --threads 1 "
                         "-q --out '{}/r{}' & ",
                         NORMLAB_BINARY, d, dir.string(), d);
    cmd += "wait";
    test::RunOptions o;
    o.env = {{"XDG_CACHE_HOME", dir.string()}, {"NORMLAB_TUNE", "fresh"}};
    const test::CliResult r = test::run_program("/bin/sh", {"-c", cmd}, o);
    ASSERT_EQ(r.exit_code, 0) << test::describe(r);
    const nlohmann::json cache = read_json(dir / "normlab" / "kernel-choices.json");
    for (int d : {8, 16, 24, 32}) {
      int entries = 0;
      for (const auto& [key, v] : cache["choices"].items()) entries += key.find(fmt::format(" d={} ", d)) != std::string::npos;
      EXPECT_GE(entries, 2) << "round " << round << ", d = " << d << ": " << cache.dump(1);  // its norm forward and backward
    }
    fs::remove_all(dir);
  }
}

// Without a writable cache directory the choice is still measured and used.
TEST(NormTuning, UnwritableCacheStillChooses) {
  Env env;
  env.set("XDG_CACHE_HOME", "/proc/normlab-no-such-dir").set("NORMLAB_TUNE", "cached");
  EXPECT_EQ(cpu::norm_choice(NormKernel::rmsnorm_forward, 16, 16).source, "measured");
  EXPECT_FALSE(fs::exists("/proc/normlab-no-such-dir"));
}

TEST(NormTuning, OffRunsTheRuleAndForcedVariantsWin) {
  Env env;
  env.set("NORMLAB_TUNE", "off").set("NORMLAB_NORM_VARIANT", std::nullopt).set("NORMLAB_STREAMING_STORES", std::nullopt);
  const cpu::NormChoice& rule_short = cpu::norm_choice(NormKernel::layernorm_forward, 8, 64);
  EXPECT_EQ(rule_short.source, "rule (NORMLAB_TUNE=off)");
  EXPECT_EQ(rule_short.best.name(), "tiled-2048");
  EXPECT_TRUE(rule_short.times.empty());
  EXPECT_EQ(cpu::norm_choice(NormKernel::layernorm_forward, 8, 4096).best.name(), "pipelined-pf2");
  EXPECT_EQ(cpu::norm_choice(NormKernel::rmsnorm_backward, 8, 512, /*dx=*/false).best.name(), "tiled-2048");

  env.set("NORMLAB_NORM_VARIANT", "pipelined-pf4+nt");
  const cpu::NormChoice& forced = cpu::norm_choice(NormKernel::add_rmsnorm_forward, 8, 64);
  EXPECT_EQ(forced.best.name(), "pipelined-pf4+nt");
  EXPECT_EQ(forced.source, "forced (NORMLAB_NORM_VARIANT=pipelined-pf4+nt)");

  // onednn only where oneDNN has the kernel; elsewhere the rule, and the choice says why.
  env.set("NORMLAB_NORM_VARIANT", "onednn");
  EXPECT_EQ(cpu::norm_choice(NormKernel::layernorm_backward, 8, 64).best.name(), "onednn");
  EXPECT_EQ(cpu::norm_choice(NormKernel::layernorm_backward, 8, 64).own.name(), "tiled-2048");
  const cpu::NormChoice& rms = cpu::norm_choice(NormKernel::rmsnorm_forward, 8, 64);
  EXPECT_EQ(rms.best.name(), "tiled-2048");
  EXPECT_NE(rms.source.find("has no rmsnorm_forward variant"), std::string::npos) << rms.source;

  env.set("NORMLAB_NORM_VARIANT", std::nullopt).set("NORMLAB_STREAMING_STORES", "1");
  const cpu::NormChoice& nt = cpu::norm_choice(NormKernel::rmsnorm_forward, 8, 64);
  EXPECT_TRUE(nt.best.stream);
  EXPECT_NE(nt.source.find("NORMLAB_STREAMING_STORES=1"), std::string::npos) << nt.source;
}

TEST(NormTuning, BadEnvironmentValuesAreOneLineErrors) {
  Env env;
  env.set("NORMLAB_TUNE", "sometimes");
  EXPECT_THROW(cpu::norm_choice(NormKernel::rmsnorm_forward, 8, 64), UsageError);
  env.set("NORMLAB_TUNE", "off").set("NORMLAB_NORM_VARIANT", "fastest");
  try {
    cpu::norm_choice(NormKernel::rmsnorm_forward, 8, 64);
    ADD_FAILURE() << "NORMLAB_NORM_VARIANT=fastest was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("NORMLAB_NORM_VARIANT"), std::string::npos) << e.what();
  }
  env.set("NORMLAB_NORM_VARIANT", std::nullopt).set("NORMLAB_STREAMING_STORES", "yes");
  EXPECT_THROW(cpu::norm_choice(NormKernel::rmsnorm_forward, 8, 64), UsageError);
}

// Where a call's arrays fit decides its class: the per-core L2, the last-level cache, or memory.
TEST(NormTuning, ShapeClassesFollowTheCaches) {
  const int64_t l2 = cpu::l2_cache_size(), llc = cpu::last_level_cache_size();
  ASSERT_GT(l2, 0);
  ASSERT_GE(llc, l2);
  EXPECT_EQ(cpu::norm_shape_class(NormKernel::layernorm_forward, 16, 64).fits, "l2");
  const int64_t d = 1024, mem_rows = 2 * llc / (2 * d * 4) + 1;
  EXPECT_EQ(cpu::norm_shape_class(NormKernel::layernorm_forward, mem_rows, d).fits, "mem");
  const cpu::NormShapeClass params_only = cpu::norm_shape_class(NormKernel::layernorm_backward, 16, 64, false);
  EXPECT_FALSE(params_only.dx);
  EXPECT_NE(params_only.key().find("params-only"), std::string::npos);
  // Forward kernels always have their output: dx is not part of their class.
  EXPECT_TRUE(cpu::norm_shape_class(NormKernel::layernorm_forward, 16, 64, false).dx);
}

}  // namespace
}  // namespace normlab
