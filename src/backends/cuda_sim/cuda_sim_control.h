// What cuda-sim offers beyond the CUDA runtime API: the detail behind its last error, counters
// of host <-> device transfers (the transfer budget of a device-resident step is tested with
// them), and the checks its tests need.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace cudasim {

// The sentence behind the last error the runtime set (which kernel, which block, what went
// wrong), kept after cudaGetLastError clears the code.
std::string last_error_detail();

struct TransferStats {
  uint64_t uploads = 0, downloads = 0;
  uint64_t upload_bytes = 0, download_bytes = 0;
};
struct MemoryStats {
  size_t live_allocations = 0;
  size_t bytes_in_use = 0;
  TransferStats transfers;
};
MemoryStats memory_stats();
TransferStats& transfer_counter();

// Whether p is inside a live device allocation / [p, p + bytes) inside one.
bool is_device_pointer(const void* p);
bool device_range(const void* p, size_t bytes);
// Runs fn(arg) with device memory readable and writable by the host (cuBLAS's reference GEMM).
void with_device_access(void (*fn)(void*), void* arg);

}  // namespace cudasim
