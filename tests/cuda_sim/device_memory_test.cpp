// Device memory under cuda-sim: cudaMalloc'd memory starts as NaN (0xff bytes); guard bytes
// around each allocation catch a kernel writing past its end or before its start
// (cudaErrorIllegalAddress naming the kernel); the memory is PROT_NONE outside launches and
// copies, so host code dereferencing a device pointer crashes as on a GPU machine; copies and
// frees outside an allocation are cudaErrorInvalidValue; transfers are counted.
#include <cstring>

#include "sim_test.h"

namespace {

using simtest::bits_of;
using simtest::DeviceArray;

__global__ void write_at_kernel(float* p, long long index) {
  if (threadIdx.x == 0 && blockIdx.x == 0) p[index] = 1.0f;
}

TEST(CudaSimMemory, AKernelWritingOnePastTheEndIsAnIllegalAddress) {
  const size_t n = 10;
  float* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, n * sizeof(float)), cudaSuccess);
  EXPECT_LAUNCH_OK(cudasim::launch("write_last", write_at_kernel, dim3(1), dim3(32), 0, p, static_cast<long long>(n - 1)));
  EXPECT_LAUNCH_ERROR(cudasim::launch("write_one_past", write_at_kernel, dim3(1), dim3(32), 0, p, static_cast<long long>(n)),
                      cudaErrorIllegalAddress);
  const std::string detail = cudasim::last_error_detail();
  EXPECT_NE(detail.find("write_one_past"), std::string::npos) << detail;
  EXPECT_NE(detail.find("0 bytes past the end of the 40-byte allocation"), std::string::npos) << detail;
  // Reported once: the guard is repaired, the next launch is clean, and so is the free.
  EXPECT_LAUNCH_OK(cudasim::launch("write_last", write_at_kernel, dim3(1), dim3(32), 0, p, static_cast<long long>(0)));
  EXPECT_EQ(cudaFree(p), cudaSuccess) << cudasim::last_error_detail();
}

TEST(CudaSimMemory, AnOddSizedAllocationCatchesTheFirstByteBeyondIt) {
  unsigned char* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 13), cudaSuccess);
  EXPECT_LAUNCH_OK(cudasim::launch("byte_12", +[](unsigned char* q) { q[12] = 0; }, dim3(1), dim3(1), 0, p));
  EXPECT_LAUNCH_ERROR(cudasim::launch("byte_13", +[](unsigned char* q) { q[13] = 0; }, dim3(1), dim3(1), 0, p),
                      cudaErrorIllegalAddress);
  EXPECT_NE(cudasim::last_error_detail().find("0 bytes past the end of the 13-byte allocation"), std::string::npos)
      << cudasim::last_error_detail();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST(CudaSimMemory, AKernelWritingBeforeTheStartIsAnIllegalAddress) {
  DeviceArray<float> buf(10);
  EXPECT_LAUNCH_ERROR(cudasim::launch("write_before", write_at_kernel, dim3(1), dim3(32), 0, buf.p, -1LL),
                      cudaErrorIllegalAddress);
  const std::string detail = cudasim::last_error_detail();
  EXPECT_NE(detail.find("write_before"), std::string::npos) << detail;
  EXPECT_NE(detail.find("4 bytes before the 40-byte allocation"), std::string::npos) << detail;
}

TEST(CudaSimMemory, AnOverrunIsNamedAtCudaFreeToo) {
  // A write past the end by a copy of the wrong size cannot happen (the copy is checked); a
  // kernel's is reported at its launch. Here: the damage is seen by cudaFree when no launch
  // checked it, through a raw write while device memory is open.
  float* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 8), cudaSuccess);
  struct Arg {
    float* p;
  } arg{p};
  cudasim::with_device_access([](void* a) { static_cast<Arg*>(a)->p[2] = 7.0f; }, &arg);
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(p), cudaErrorIllegalAddress);
  EXPECT_NE(cudasim::last_error_detail().find("past the end of the 8-byte allocation"), std::string::npos)
      << cudasim::last_error_detail();
  (void)cudaGetLastError();
}

using CudaSimMemoryDeathTest = ::testing::Test;

TEST_F(CudaSimMemoryDeathTest, HostCodeReadingDeviceMemoryOutsideALaunchCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Under ASan the crash is ASan's SEGV report, not the plain signal: any message will do.
  EXPECT_DEATH(
      {
        float* p = nullptr;
        if (cudaMalloc(&p, 64) != cudaSuccess) return;
        volatile float v = *static_cast<volatile float*>(p);
        (void)v;
      },
      ".*");
}

TEST_F(CudaSimMemoryDeathTest, HostCodeWritingDeviceMemoryAfterAKernelRanCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* p = nullptr;
        if (cudaMalloc(&p, 64) != cudaSuccess) return;
        if (cudasim::launch("write_first", write_at_kernel, dim3(1), dim3(1), 0, p, 0LL) != cudaSuccess) return;
        *static_cast<volatile float*>(p) = 2.0f;
      },
      ".*");
}

TEST(CudaSimMemory, TheDeathTestsControl) {
  // The same accesses through the API work: only the raw host dereference is refused.
  DeviceArray<float> buf(16);
  EXPECT_LAUNCH_OK(cudasim::launch("write_first", write_at_kernel, dim3(1), dim3(1), 0, buf.p, 0LL));
  EXPECT_EQ(buf.download()[0], 1.0f);
  EXPECT_TRUE(cudasim::is_device_pointer(buf.p + 15));
  EXPECT_FALSE(cudasim::is_device_pointer(buf.p + 17));  // (buf.p + 16, one past the end, counts as in)
  EXPECT_TRUE(cudasim::device_range(buf.p, 16 * sizeof(float)));
  EXPECT_FALSE(cudasim::device_range(buf.p, 16 * sizeof(float) + 1));
  float host = 0.0f;
  EXPECT_FALSE(cudasim::is_device_pointer(&host));
}

TEST(CudaSimMemory, CopiesOutsideAnAllocationAreInvalidValue) {
  DeviceArray<float> a(8), b(8);
  std::vector<float> host(9, 1.0f);
  const cudasim::TransferStats before = cudasim::transfer_counter();
  struct Case {
    void* dst;
    const void* src;
    size_t bytes;
    cudaMemcpyKind kind;
    const char* what;
  };
  const Case cases[] = {
      {a.p, host.data(), 9 * sizeof(float), cudaMemcpyHostToDevice, "upload one float too many"},
      {a.p + 1, host.data(), 8 * sizeof(float), cudaMemcpyHostToDevice, "upload from an offset, past the end"},
      {host.data(), a.p + 4, 5 * sizeof(float), cudaMemcpyDeviceToHost, "download past the end"},
      {host.data(), a.p - 1, sizeof(float), cudaMemcpyDeviceToHost, "download from before the start"},
      {b.p, a.p, 9 * sizeof(float), cudaMemcpyDeviceToDevice, "device to device, too long"},
      {host.data(), host.data() + 1, sizeof(float), cudaMemcpyHostToDevice, "a host destination called device"},
      {a.p, b.p, sizeof(float), cudaMemcpyHostToDevice, "a device source called host"},
  };
  for (const Case& c : cases) {
    (void)cudaGetLastError();
    EXPECT_EQ(cudaMemcpy(c.dst, c.src, c.bytes, c.kind), cudaErrorInvalidValue) << c.what;
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue) << c.what;
    EXPECT_NE(cudasim::last_error_detail().find("cudaMemcpy"), std::string::npos) << cudasim::last_error_detail();
  }
  EXPECT_EQ(cudaMemcpy(a.p, host.data(), 4, static_cast<cudaMemcpyKind>(7)), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemset(a.p + 4, 0, 5 * sizeof(float)), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  const cudasim::TransferStats after = cudasim::transfer_counter();
  EXPECT_EQ(after.uploads, before.uploads) << "a refused copy was counted";
  EXPECT_EQ(after.downloads, before.downloads) << "a refused copy was counted";
  // Nothing was written either.
  for (float v : a.download()) EXPECT_EQ(bits_of(v), 0xffffffffu);
}

TEST(CudaSimMemory, NewMemoryReadsAsNaNEvenWhenReused) {
  // 3 MiB: larger than any block freed before in this program, so that the second allocation
  // must reuse the first one's memory (first fit, freed blocks coalesced).
  const size_t size = size_t{3} << 20;
  std::vector<unsigned char> bytes(size, 0);
  unsigned char* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, size), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(bytes.data(), p, size, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(bytes[i], 0xff) << i;
  // Written, freed, allocated again: NaN again, not the old data.
  ASSERT_EQ(cudaMemset(p, 0, size), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  unsigned char* q = nullptr;
  ASSERT_EQ(cudaMalloc(&q, size), cudaSuccess);
  EXPECT_TRUE(q < p + size && p < q + size) << "the memory was not reused: the test tests nothing";
  ASSERT_EQ(cudaMemcpy(bytes.data(), q, size, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(bytes[i], 0xff) << i;
  EXPECT_EQ(cudaFree(q), cudaSuccess);
}

TEST(CudaSimMemory, FreeingWhatIsNotAnAllocationIsInvalidValue) {
  float* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  float host[4];
  (void)cudaGetLastError();
  EXPECT_EQ(cudaFree(p + 1), cudaErrorInvalidValue) << "inside an allocation, not its start";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_NE(cudasim::last_error_detail().find("not the start of a live device allocation"), std::string::npos);
  EXPECT_EQ(cudaFree(host), cudaErrorInvalidValue) << "host memory";
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue) << "a double free";
  EXPECT_EQ(cudaMalloc(static_cast<void**>(nullptr), 4), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST(CudaSimMemory, TransfersAndAllocationsAreCounted) {
  const cudasim::MemoryStats s0 = cudasim::memory_stats();
  cudasim::transfer_counter() = cudasim::TransferStats{};
  {
    DeviceArray<float> a(10), b(3);
    const cudasim::MemoryStats s1 = cudasim::memory_stats();
    EXPECT_EQ(s1.live_allocations, s0.live_allocations + 2);
    EXPECT_EQ(s1.bytes_in_use, s0.bytes_in_use + 13 * sizeof(float));
    EXPECT_EQ(s1.transfers.uploads, 0u);
    std::vector<float> h(10, 2.0f);
    ASSERT_EQ(cudaMemcpy(a.p, h.data(), 40, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(b.p, h.data(), 12, cudaMemcpyDefault), cudaSuccess);  // inferred: an upload
    ASSERT_EQ(cudaMemcpy(b.p, a.p, 12, cudaMemcpyDeviceToDevice), cudaSuccess);  // not a transfer
    ASSERT_EQ(cudaMemset(a.p, 0, 40), cudaSuccess);                               // nor this
    ASSERT_EQ(cudaMemcpy(h.data(), a.p, 40, cudaMemcpyDeviceToHost), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(h.data(), b.p, 8, cudaMemcpyDeviceToHost), cudaSuccess);
    const cudasim::TransferStats t = cudasim::transfer_counter();
    EXPECT_EQ(t.uploads, 2u);
    EXPECT_EQ(t.upload_bytes, 52u);
    EXPECT_EQ(t.downloads, 2u);
    EXPECT_EQ(t.download_bytes, 48u);
    EXPECT_EQ(cudasim::memory_stats().transfers.downloads, 2u);
  }
  const cudasim::MemoryStats s2 = cudasim::memory_stats();
  EXPECT_EQ(s2.live_allocations, s0.live_allocations);
  EXPECT_EQ(s2.bytes_in_use, s0.bytes_in_use);
}

}  // namespace
