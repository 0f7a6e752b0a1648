// libFuzzer target: the safetensors checkpoint reader and the training-state reader on top of it
// (train --resume). Any input file is either read (then its tensors match their header) or
// refused with one clean error; never a crash or a read outside it.
//   scripts/fuzz.sh 60 checkpoint
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "fuzz_common.h"
#include "normlab/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/normlab_fuzz_checkpoint." + std::to_string(getpid());
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  normlab::fuzz::only_usage_errors([&] {
    normlab::SafetensorsFile f = normlab::load_safetensors(path);
    for (const auto& [name, t] : f.tensors) (void)t.nbytes();
  });
  normlab::fuzz::only_usage_errors([&] { (void)normlab::load_train_state(path); });
  return 0;
}
