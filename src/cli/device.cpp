// --device / --tf32 (cli_common.h).
#include <algorithm>

#include "cli_common.h"
#include "normlab/backend.h"
#include "normlab/cuda.h"
#include "normlab/cuda_backend.h"
#include "normlab/error.h"

namespace normlab::cli {

void add_device_flags(CLI::App& sub, DeviceOptions& d) {
  sub.add_option("--device", d.device,
                 "cpu or cuda: where the kernels run (cuda: normlab's CUDA kernels on GPU 0; exit 2 with "
                 "\"no CUDA device found\" when there is none) (default cpu)");
  sub.add_flag("--tf32", d.tf32,
               "With --device cuda: let cuBLAS use TF32 tensor cores for float32 products (off by default, "
               "so that results compare with the cpu)");
}

void check_device(const DeviceOptions& d) {
  NL_USAGE(d.device == "cpu" || d.device == "cuda", "--device must be cpu or cuda, got '{}'", shown(d.device));
  NL_USAGE(!d.tf32 || d.device == "cuda", "--tf32 applies to --device cuda only");
  if (d.device != "cuda") return;
  const std::vector<std::string> names = backend_names();
  if (std::find(names.begin(), names.end(), "cuda") == names.end())
    throw UsageError(fmt::format("no CUDA device found (CUDA {})", cuda_summary()));
  cuda_set_tf32(d.tf32);
}

void use_device(const DeviceOptions& d) {
  check_device(d);
  if (d.device == "cuda") set_default_cpu_backend("cuda-host");
}

}  // namespace normlab::cli
