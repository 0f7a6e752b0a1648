// The column reductions (columns.cu) that sum_rows and the norm backward share: deterministic
// two-stage sums over rows, no float atomics. Private to src/backends/cuda.
#pragma once
#include <algorithm>
#include <cstdint>

#include "common.cuh"

namespace normlab::cuda {

// dgamma (and dbeta for LayerNorm) of a norm backward by the two-stage column sums: the sums
// over rows of dy*xhat (and of dy), xhat = (x - mean)*rstd (mean = 0 for RMSNorm). `work` holds
// column_work(rows, cols) floats. T: float or __nv_bfloat16 (the storage of dy and x).
template <class T>
void norm_column_sums(float* dgamma, float* dbeta, const T* dy, const T* x, const float* mean,
                      const float* rstd, int64_t rows, int64_t cols, bool rms, float* work,
                      const char* name);

// The second stage alone: out_g[j] = sum over c of part_g[c, j] in order of c (in double), the
// same for b (nullable); for kernels that write their own per-block partial sums.
void column_final(float* out_g, float* out_b, const float* part_g, const float* part_b,
                  int64_t chunks, int64_t cols, const char* name);

// Chunks of rows for the column reductions' partial sums (here and in the kernels that write
// their own: squash.cu and other norms): enough blocks to fill the GPU, few enough that the
// partials stay small. Sets rows_per_chunk.
inline int64_t column_chunks(int64_t rows, int64_t& rows_per_chunk) {
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(256, rows / 64));
  rows_per_chunk = std::max<int64_t>(1, (rows + chunks - 1) / chunks);
  return std::max<int64_t>(1, (rows + rows_per_chunk - 1) / rows_per_chunk);
}

// At most this many blocks for the one-pass norm backward (its partial sums, in the column
// workspace, are sized by it): 4 per multiprocessor, at most one per row.
inline int64_t onepass_blocks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(rows, 4LL * device_sms()));
}

}  // namespace normlab::cuda
