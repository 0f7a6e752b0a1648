// libFuzzer target: the sweep spec reader and planner (a spec file's JSON: base, grid, zip, seeds,
// summary). Anything accepted plans points whose configs are valid; the rest is one clean error.
//   scripts/fuzz.sh 60 sweep_spec
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "fuzz_common.h"
#include "normlab/sweep.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/normlab_fuzz_spec." + std::to_string(getpid()) + ".json";
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  normlab::fuzz::only_usage_errors([&] {
    normlab::SweepRequest request;
    request.spec_file = path;
    (void)normlab::plan_sweep(request);
  });
  return 0;
}
