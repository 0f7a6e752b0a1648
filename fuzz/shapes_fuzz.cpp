// libFuzzer target: the vector and shape option parsers (handcalc's --x/--eps/--decimals,
// gradcheck's --shape, bench's --shapes and --threads). The first byte picks the parser.
//   scripts/fuzz.sh 60 shapes
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "normlab/bench.h"
#include "normlab/gradcheck.h"
#include "normlab/handcalc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  normlab::fuzz::only_usage_errors([&] {
    switch (data[0] % 7) {
      case 0: normlab::handcalc::parse_vector("--x", text); break;
      case 1: normlab::handcalc::parse_scalar("--eps", text); break;
      case 2: normlab::handcalc::parse_decimals("--decimals", text); break;
      case 3: normlab::parse_case_shape(text); break;
      case 4: normlab::bench::parse_shapes(text, "--shapes"); break;
      case 5: normlab::bench::parse_threads(text, "--threads"); break;
      default: normlab::handcalc::parse_norm("--norm", text, true); break;
    }
  });
  return 0;
}
