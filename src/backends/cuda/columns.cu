// Column sums over rows (sum_rows, the norms' dgamma/dbeta): deterministic two-stage reductions.
#include "columns.h"

namespace normlab::cuda {

namespace {

// Stage 1: block (32, 8) sums rows [r0, r1) of 32 columns; thread (tx, ty) takes rows r0+ty,
// r0+ty+8, ...; the 8 partial sums of a column are added in order of ty. Stage 2 adds the chunks
// in order. Mode: 0 sum of x; 1 LayerNorm (g: dy*xhat, b: dy); 2 RMSNorm (g: dy*xhat).
constexpr int kColX = 32, kColY = 8;

template <class T, int kMode>
__global__ void column_partial_kernel(float* part_g, float* part_b, const T* dy, const T* x,
                                      const float* mean, const float* rstd, int64_t rows,
                                      int64_t cols, int64_t rows_per_chunk) {
  NL_SHARED_ARRAY2(float, sg, kColY, kColX + 1);
  NL_SHARED_ARRAY2(float, sb, kColY, kColX + 1);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColX + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float ag = 0.0f, ab = 0.0f;
  if (j < cols) {
    for (int64_t i = r0 + ty; i < r1; i += kColY) {
      const float g = to_f(dy[i * cols + j]);
      if (kMode == 0) {
        ag += g;
      } else {
        const float mu = kMode == 1 ? mean[i] : 0.0f;
        const float xhat = (to_f(x[i * cols + j]) - mu) * rstd[i];
        ag += g * xhat;
        if (kMode == 1) ab += g;
      }
    }
  }
  sg[ty][tx] = ag;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && j < cols) {
    float tg = 0.0f, tb = 0.0f;
    for (int k = 0; k < kColY; ++k) {
      tg += sg[k][tx];
      tb += sb[k][tx];
    }
    part_g[static_cast<int64_t>(blockIdx.y) * cols + j] = tg;
    if (part_b) part_b[static_cast<int64_t>(blockIdx.y) * cols + j] = tb;
  }
}

__global__ void column_final_kernel(float* out_g, float* out_b, const float* part_g,
                                    const float* part_b, int64_t chunks, int64_t cols) {
  NL_GRID_STRIDE(j, cols) {
    double tg = 0.0, tb = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      tg += part_g[c * cols + j];
      if (part_b) tb += part_b[c * cols + j];
    }
    if (out_g) out_g[j] = static_cast<float>(tg);
    if (out_b) out_b[j] = static_cast<float>(tb);
  }
}

template <class T, int kMode>
void column_reduce(float* out_g, float* out_b, const T* dy, const T* x, const float* mean,
                   const float* rstd, int64_t rows, int64_t cols, float* work, const char* name) {
  if (cols == 0) return;
  if (rows == 0) {
    if (out_g) fill_f32(out_g, cols, 0.0f);
    if (out_b) fill_f32(out_b, cols, 0.0f);
    return;
  }
  int64_t rpc = 0;
  const int64_t chunks = column_chunks(rows, rpc);
  float* part_g = work;
  float* part_b = kMode == 1 ? work + chunks * cols : nullptr;
  dim3 block(kColX, kColY);
  dim3 grid(static_cast<unsigned>((cols + kColX - 1) / kColX), static_cast<unsigned>(chunks));
  launch(name, column_partial_kernel<T, kMode>, grid, block, 0, part_g, part_b, dy, x, mean, rstd, rows, cols, rpc);
  launch(name, column_final_kernel, grid_for(cols), kThreads, 0, out_g, out_b, part_g, part_b, chunks, cols);
}

}  // namespace

int64_t column_work(int64_t rows, int64_t cols) {
  int64_t rpc = 0;
  return 2 * std::max(column_chunks(rows, rpc), onepass_blocks(rows)) * cols;
}

template <class T>
void sum_rows(float* out, const T* x, int64_t rows, int64_t cols, float* work) {
  column_reduce<T, 0>(out, nullptr, x, nullptr, nullptr, nullptr, rows, cols, work, "sum_rows");
}
template void sum_rows<float>(float*, const float*, int64_t, int64_t, float*);
template void sum_rows<__nv_bfloat16>(float*, const __nv_bfloat16*, int64_t, int64_t, float*);
template void sum_rows<__half>(float*, const __half*, int64_t, int64_t, float*);

template <class T>
void norm_column_sums(float* dgamma, float* dbeta, const T* dy, const T* x, const float* mean,
                      const float* rstd, int64_t rows, int64_t cols, bool rms, float* work,
                      const char* name) {
  if (rms)
    column_reduce<T, 2>(dgamma, nullptr, dy, x, mean, rstd, rows, cols, work, name);
  else
    column_reduce<T, 1>(dgamma, dbeta, dy, x, mean, rstd, rows, cols, work, name);
}
template void norm_column_sums<float>(float*, float*, const float*, const float*, const float*, const float*,
                                      int64_t, int64_t, bool, float*, const char*);
template void norm_column_sums<__nv_bfloat16>(float*, float*, const __nv_bfloat16*, const __nv_bfloat16*,
                                              const float*, const float*, int64_t, int64_t, bool, float*,
                                              const char*);
template void norm_column_sums<__half>(float*, float*, const __half*, const __half*, const float*, const float*,
                                       int64_t, int64_t, bool, float*, const char*);

void column_final(float* out_g, float* out_b, const float* part_g, const float* part_b,
                  int64_t chunks, int64_t cols, const char* name) {
  launch(name, column_final_kernel, grid_for(cols), kThreads, 0, out_g, out_b, part_g, part_b, chunks, cols);
}

}  // namespace normlab::cuda
