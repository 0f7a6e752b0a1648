// Softmax over the last dimension and the cross-entropy loss, one block per row: the cpu
// backend's softmax_loss.cpp.
#include "common.cuh"

namespace normlab::cuda {

namespace {

// A row's max and sum of exp(x - max), over the whole block: softmax's and the loss's
// log-sum-exp, both shifted by the max so that no exp overflows.
struct RowExp {
  float max, sum;
};
__device__ RowExp row_max_sum_exp(In x, int64_t base, int64_t d, float* scratch) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) mx = fmaxf(mx, ld(x, base + j));
  mx = block_max(mx, scratch);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) sum += expf(ld(x, base + j) - mx);
  return {mx, block_sum(sum, scratch)};
}

__global__ void softmax_forward_kernel(Out y, In x, int64_t d) {
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * d;
  const RowExp e = row_max_sum_exp(x, base, d, scratch);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) st(y, base + j, expf(ld(x, base + j) - e.max) / e.sum);
}

}  // namespace

void softmax_forward(Out y, In x, int64_t n, int64_t d) {
  if (n <= 0 || d <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "softmax_forward");
  launch("softmax_forward", softmax_forward_kernel, static_cast<unsigned>(n), row_threads(d, 256), 0, y, x, d);
}

namespace {

__global__ void softmax_backward_kernel(Out dx, In dy, In y, int64_t d) {
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * d;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) dot += ld(dy, base + j) * ld(y, base + j);
  dot = block_sum(dot, scratch);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) st(dx, base + j, ld(y, base + j) * (ld(dy, base + j) - dot));
}

}  // namespace

void softmax_backward(Out dx, In dy, In y, int64_t n, int64_t d) {
  if (n <= 0 || d <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "softmax_backward");
  launch("softmax_backward", softmax_backward_kernel, static_cast<unsigned>(n), row_threads(d, 256), 0, dx, dy, y, d);
}

namespace {

__global__ void cross_entropy_rows_kernel(float* probs, double* row_loss, In logits, const int32_t* targets,
                                          int64_t v) {
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const int64_t base = row * v;
  const RowExp e = row_max_sum_exp(logits, base, v, scratch);
  const float lse = e.max + logf(e.sum);
  float* pr = probs + base;
  for (int64_t j = threadIdx.x; j < v; j += blockDim.x) pr[j] = expf(ld(logits, base + j) - lse);
  if (threadIdx.x == 0) {
    const int32_t t = targets[row];
    const bool ok = t >= 0 && static_cast<int64_t>(t) < v;
    row_loss[row] = ok ? static_cast<double>(lse) - static_cast<double>(ld(logits, base + t)) : NAN;
  }
}

__global__ void mean_rows_kernel(float* loss, const double* row_loss, int64_t n) {
  NL_SHARED_ARRAY(double, scratch, 32);
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += row_loss[i];
  acc = block_sum_d(acc, scratch);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(acc / static_cast<double>(n));
}

}  // namespace

void cross_entropy_forward(float* loss, float* probs, In logits, const int32_t* targets, int64_t n, int64_t v,
                           double* work) {
  if (n <= 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "cross_entropy_forward");
  launch("cross_entropy_forward", cross_entropy_rows_kernel, static_cast<unsigned>(n), row_threads(v, 256), 0, probs, work, logits, targets, v);
  launch("cross_entropy_forward", mean_rows_kernel, 1, kThreads, 0, loss, work, n);
}

namespace {

__global__ void cross_entropy_backward_kernel(Out dlogits, const float* dloss,
                                              const float* probs, const int32_t* targets,
                                              int64_t n, int64_t v) {
  const float s = dloss[0] / static_cast<float>(n);
  NL_GRID_STRIDE(idx, n * v) {
    const int64_t i = idx / v, j = idx % v;
    const float onehot = j == static_cast<int64_t>(targets[i]) ? 1.0f : 0.0f;
    st(dlogits, idx, s * (probs[idx] - onehot));
  }
}

}  // namespace

void cross_entropy_backward(Out dlogits, const float* dloss, const float* probs, const int32_t* targets, int64_t n,
                            int64_t v) {
  if (n * v <= 0) return;
  launch("cross_entropy_backward", cross_entropy_backward_kernel, grid_for(n * v), kThreads, 0, dlogits, dloss, probs, targets, n, v);
}

}  // namespace normlab::cuda
