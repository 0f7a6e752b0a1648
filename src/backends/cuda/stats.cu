// Statistics of a log step (the RowNorms and AttentionLogitStats kernels): reduced on the device so
// that a device-resident run downloads one value per row. Double arithmetic throughout, one block
// per row, common.cuh's block reductions (a fixed order: results repeat bit for bit).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "common.cuh"

namespace normlab::cuda {

namespace {

constexpr int kStatThreads = 128;  // a multiple of 32: block_reduce (common.cuh)

__global__ void row_norms_kernel(float* norms, In x, int64_t d) {
  NL_SHARED_ARRAY(double, scratch, 32);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * d;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const double v = ld(x, base + j);
    s += v * v;
  }
  s = block_sum_d(s, scratch);
  if (threadIdx.x == 0) norms[blockIdx.x] = static_cast<float>(sqrt(s));
}

// One block per (b, h, t) row; the logits are computed twice (for the max, then for the sums)
// instead of kept: no shared-memory limit on T.
__global__ void attention_logit_stats_kernel(float* max_logit, float* entropy, In q, In k, int64_t t, int64_t h,
                                             int64_t dh, double scale) {
  NL_SHARED_ARRAY(double, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t ti = row % t, hi = (row / t) % h, bi = row / (t * h);
  const int64_t c = h * dh;
  const int64_t qt = (bi * t + ti) * c + hi * dh;
  auto logit = [&](int64_t si) {
    const int64_t ks = (bi * t + si) * c + hi * dh;
    double dot = 0.0;
    for (int64_t j = 0; j < dh; ++j) dot += static_cast<double>(ld(q, qt + j)) * static_cast<double>(ld(k, ks + j));
    return scale * dot;
  };
  double top = -INFINITY;
  for (int64_t si = threadIdx.x; si <= ti; si += blockDim.x) {
    const double l = logit(si);
    top = l > top ? l : top;
  }
  top = block_max_d(top, scratch);
  double z = 0.0, weighted = 0.0;
  for (int64_t si = threadIdx.x; si <= ti; si += blockDim.x) {
    const double l = logit(si), e = exp(l - top);
    z += e;
    weighted += e * (l - top);
  }
  z = block_sum_d(z, scratch);
  weighted = block_sum_d(weighted, scratch);
  if (threadIdx.x == 0) {
    max_logit[row] = static_cast<float>(top);
    entropy[row] = static_cast<float>(log(z) - weighted / z);
  }
}

}  // namespace

void row_norms(float* norms, In x, int64_t n, int64_t d) {
  if (n <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "row_norms");
  launch("row_norms", row_norms_kernel, static_cast<unsigned>(n), kStatThreads, 0, norms, x, d);
}

void attention_logit_stats(float* max_logit, float* entropy, In q, In k, int64_t b, int64_t t, int64_t h, int64_t dh,
                           double scale) {
  const int64_t rows = b * h * t;
  if (rows <= 0) return;
  if (!rows_fit(rows)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "attention_logit_stats");
  launch("attention_logit_stats", attention_logit_stats_kernel, static_cast<unsigned>(rows), kStatThreads, 0,
         max_logit, entropy, q, k, t, h, dh, scale);
}

}  // namespace normlab::cuda
