// The module's one exported symbol (the rest of it is compiled with hidden visibility): the
// table the loader reads (module_abi.h).
#include "flavor.h"
#include "module.h"
#include "module_abi.h"
#if defined(NORMLAB_CUDA_SIM)
#include "cuda_sim_control.h"
#endif

namespace {

const normlab::cuda::ModuleTable kTable = {
    NORMLAB_CUDA_BUILD_ID,
    normlab::cuda::kBackendName,
    normlab::cuda::device_count,
    normlab::cuda::device_info,
    normlab::cuda::summary,
    normlab::cuda::make_backend,
    normlab::cuda::set_tf32,
    normlab::cuda::tf32,
#if defined(NORMLAB_CUDA_SIM)
    [] {
      const cudasim::TransferStats& t = cudasim::transfer_counter();
      return normlab::CudaTransfers{t.uploads, t.downloads, t.upload_bytes, t.download_bytes};
    },
#else
    nullptr,
#endif
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const normlab::cuda::ModuleTable* normlab_cuda_module() {
  return &kTable;
}
