// Layout and gathers: the transpose, the token-id check, the embedding lookup and its
// backward: the cpu backend's layout.cpp (its sum_rows is columns.cu here).
#include "common.cuh"

namespace normlab::cuda {

namespace {

__global__ void transpose_kernel(Out out, In x, int64_t outer, int64_t a, int64_t mid, int64_t bdim, int64_t inner) {
  NL_GRID_STRIDE(dst, outer * a * mid * bdim * inner) {
    // dst indexes out (O, Bd, M, A, I)
    int64_t r = dst;
    const int64_t ii = r % inner;
    r /= inner;
    const int64_t ai = r % a;
    r /= a;
    const int64_t mi = r % mid;
    r /= mid;
    const int64_t bi = r % bdim;
    const int64_t o = r / bdim;
    st(out, dst, ld(x, (((o * a + ai) * mid + mi) * bdim + bi) * inner + ii));
  }
}

}  // namespace

void transpose(Out out, In x, int64_t outer, int64_t a, int64_t mid, int64_t bdim, int64_t inner) {
  const int64_t n = outer * a * mid * bdim * inner;
  if (n <= 0) return;
  launch("transpose", transpose_kernel, grid_for(n), kThreads, 0, out, x, outer, a, mid, bdim, inner);
}

namespace {

__global__ void check_ids_kernel(int32_t* flag, const int32_t* ids, int64_t n, int64_t v) {
  NL_GRID_STRIDE(i, n) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<int64_t>(id) >= v) {
      // The lowest bad index wins (int atomics only: the answer does not depend on timing).
      atomicMin(flag, static_cast<int32_t>(i < 2147483647LL ? i : 2147483646LL));
    }
  }
}

}  // namespace

int64_t first_bad_id(const int32_t* ids, int64_t n, int64_t v, int32_t* flag_dev,
                     const char* kernel) {
  if (n <= 0) return -1;
  const int32_t none = 2147483647;
  check(cudaMemcpy(flag_dev, &none, sizeof none, cudaMemcpyHostToDevice), "cudaMemcpy", kernel);
  launch(kernel, check_ids_kernel, grid_for(n), kThreads, 0, flag_dev, ids, n, v);
  int32_t found = none;
  check(cudaMemcpy(&found, flag_dev, sizeof found, cudaMemcpyDeviceToHost), "cudaMemcpy", kernel);
  return found == none ? -1 : found;
}

namespace {

__global__ void embedding_forward_kernel(Out y, In table, const int32_t* ids, int64_t n, int64_t v, int64_t d) {
  NL_GRID_STRIDE(idx, n * d) {
    const int64_t i = idx / d, j = idx % d;
    const int64_t id = ids[i];
    st(y, idx, (id >= 0 && id < v) ? ld(table, id * d + j) : NAN);
  }
}

}  // namespace

void embedding_forward(Out y, In table, const int32_t* ids, int64_t n, int64_t v, int64_t d) {
  if (n * d <= 0) return;
  launch("embedding_forward", embedding_forward_kernel, grid_for(n * d), kThreads, 0, y, table, ids, n, v, d);
}

namespace {

// dtable[r, j] = sum over i with ids[i] == r of dy[i, j], summed in order of i (no atomics):
// block (128 columns) x one vocabulary row at a time; the ids pass through shared memory in
// tiles. Cost O(V * N) id comparisons: meant for normlab's small vocabularies (bytes, toy).
constexpr int kEmbCols = 128, kEmbTile = 1024;
__global__ void embedding_backward_kernel(Out dtable, In dy, const int32_t* ids, int64_t n, int64_t v, int64_t d) {
  NL_SHARED_ARRAY(int32_t, tile, kEmbTile);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kEmbCols + threadIdx.x;
  for (int64_t r = blockIdx.y; r < v; r += gridDim.y) {
    float acc = 0.0f;
    for (int64_t t0 = 0; t0 < n; t0 += kEmbTile) {
      const int64_t len = n - t0 < kEmbTile ? n - t0 : kEmbTile;
      __syncthreads();
      for (int64_t k = threadIdx.x; k < len; k += blockDim.x) tile[k] = ids[t0 + k];
      __syncthreads();
      if (j < d)
        for (int64_t k = 0; k < len; ++k)
          if (static_cast<int64_t>(tile[k]) == r) acc += ld(dy, (t0 + k) * d + j);
    }
    if (j < d) st(dtable, r * d + j, acc);
  }
}

}  // namespace

void embedding_backward(Out dtable, In dy, const int32_t* ids, int64_t n, int64_t v, int64_t d) {
  if (v * d <= 0) return;
  dim3 grid(static_cast<unsigned>((d + kEmbCols - 1) / kEmbCols),
            static_cast<unsigned>(std::min<int64_t>(v, 65535)));
  launch("embedding_backward", embedding_backward_kernel, grid, kEmbCols, 0, dtable, dy, ids, n, v, d);
}

}  // namespace normlab::cuda
