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
                 "cpu, cuda or cuda-sim: where the kernels run (cuda: normlab's CUDA kernels on GPU 0; exit 2 with "
                 "\"no CUDA device found\" when there is none; cuda-sim: the same kernels simulated on the host, "
                 "slow, for checking them without a GPU) (default cpu)");
  sub.add_flag("--tf32", d.tf32,
               "With --device cuda: let cuBLAS use TF32 tensor cores for float32 products (off by default, "
               "so that results compare with the cpu)");
}

void check_device(const DeviceOptions& d) {
  NL_USAGE(d.device == "cpu" || d.device == "cuda" || d.device == "cuda-sim",
           "--device must be cpu, cuda or cuda-sim, got '{}'", shown(d.device));
  NL_USAGE(!d.tf32 || d.device == "cuda", "--tf32 applies to --device cuda only");
  if (d.device == "cuda-sim") {
    const std::vector<std::string> names = backend_names();
    if (std::find(names.begin(), names.end(), "cuda-sim") == names.end())
      throw UsageError(fmt::format("cuda-sim is not available ({})", cuda_sim_summary()));
    return;
  }
  if (d.device != "cuda") return;
  const std::vector<std::string> names = backend_names();
  if (std::find(names.begin(), names.end(), "cuda") == names.end())
    throw UsageError(fmt::format("no CUDA device found (CUDA {})", cuda_summary()));
  cuda_set_tf32(d.tf32);
}

void use_device(const DeviceOptions& d) {
  check_device(d);
  if (d.device == "cuda") set_compute_device(Device::cuda);
  if (d.device == "cuda-sim") set_compute_device(Device::cuda_sim);
}

}  // namespace normlab::cli
