// libFuzzer target: the sweep spec reader and planner (a spec file's JSON: base, grid, zip, seeds,
// summary; values such as 1e400, keys given twice, values of the wrong type). Anything accepted
// plans points whose configs are valid, and its resolved spec (DIR/spec.json) plans the same points
// again; the rest is one clean error.
//   scripts/fuzz.sh 60 sweep_spec
// Grids are capped at 64 points (max_points): the planner refuses a larger one before expanding it,
// so an input costs milliseconds, where a 100000-point grid would cost seconds of planning each.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fuzz_common.h"
#include "normlab/config.h"
#include "normlab/sweep.h"

namespace {

void write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/normlab_fuzz_spec." + std::to_string(getpid()) + ".json";
  static const std::string resolved = "/tmp/normlab_fuzz_spec." + std::to_string(getpid()) + ".resolved.json";
  write(path, std::string(reinterpret_cast<const char*>(data), size));
  normlab::fuzz::only_usage_errors([&] {
    normlab::SweepRequest request;
    request.spec_file = path;
    request.max_points = 64;
    const normlab::SweepPlan plan = normlab::plan_sweep(request);
    for (const normlab::SweepPoint& p : plan.points) normlab::validate_config(p.config);
    write(resolved, plan.spec_json);
    normlab::SweepRequest again;
    again.spec_file = resolved;
    again.max_points = 64;
    normlab::SweepPlan back;
    try {
      back = normlab::plan_sweep(again);
    } catch (const normlab::UsageError& e) {
      finding(std::string("the resolved spec does not plan: ") + e.what());
    }
    if (back.points.size() != plan.points.size()) finding("the resolved spec plans another number of points");
    for (size_t i = 0; i < plan.points.size(); ++i)
      if (back.points[i].name != plan.points[i].name || back.points[i].hash != plan.points[i].hash)
        finding("the resolved spec plans point " + plan.points[i].name + " differently");
  });
  return 0;
}
