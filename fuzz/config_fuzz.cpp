// libFuzzer target: the train config parser (a --config file's JSON, and --key value flags),
// then validation; whatever is accepted must be written back as a config that reads back.
//   scripts/fuzz.sh 60 config
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "normlab/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  normlab::fuzz::only_usage_errors([&] {
    normlab::TrainConfig cfg;
    if (!text.empty() && text[0] == '-') {
      // "--key value" flags: the first line is the key, the rest its value.
      const size_t nl = text.find('\n');
      const std::string key = text.substr(2 < text.size() ? 2 : text.size(), nl == std::string::npos ? std::string::npos : nl - 2);
      const std::string value = nl == std::string::npos ? "" : text.substr(nl + 1);
      normlab::apply_config_value(cfg, key, value);
    } else {
      normlab::apply_config_json(cfg, text, "fuzz.json");
    }
    normlab::validate_config(cfg);  // includes: the resolved config reads back as itself
  });
  return 0;
}
