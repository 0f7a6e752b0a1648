// libFuzzer target: bench's JSON reader (the documents `bench merge` and `bench --compare` read).
//   scripts/fuzz.sh 60 bench_json
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "normlab/bench.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  namespace b = normlab::bench;
  normlab::fuzz::only_usage_errors([&] { b::bench_kind_of_json(text, "fuzz.json"); });
  normlab::fuzz::only_usage_errors([&] { b::norm_report_from_json(text, "fuzz.json"); });
  normlab::fuzz::only_usage_errors([&] { b::step_report_from_json(text, "fuzz.json"); });
  normlab::fuzz::only_usage_errors([&] { b::timed_entries_from_json(text, "fuzz.json"); });
  return 0;
}
