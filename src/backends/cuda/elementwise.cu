// Elementwise kernels over n values (grid-stride), the sum of squares, the linear layer's
// bias + residual epilogue and the Adam step: the cpu backend's elementwise.cpp.
#include "common.cuh"

namespace normlab::cuda {

namespace {

template <class T>
__global__ void fill_kernel(T* out, int64_t n, T value) {
  NL_GRID_STRIDE(i, n) out[i] = value;
}

}  // namespace

void fill_f32(float* out, int64_t n, float value) {
  if (n <= 0) return;
  launch("fill", fill_kernel<float>, grid_for(n), kThreads, 0, out, n, value);
}
void fill_f64(double* out, int64_t n, double value) {
  if (n <= 0) return;
  launch("fill", fill_kernel<double>, grid_for(n), kThreads, 0, out, n, value);
}
void fill_i32(int32_t* out, int64_t n, int32_t value) {
  if (n <= 0) return;
  launch("fill", fill_kernel<int32_t>, grid_for(n), kThreads, 0, out, n, value);
}
void fill_u16(uint16_t* out, int64_t n, uint16_t bits) {
  if (n <= 0) return;
  launch("fill", fill_kernel<uint16_t>, grid_for(n), kThreads, 0, out, n, bits);
}

namespace {

__global__ void convert_kernel(Out out, In x, int64_t n) {
  NL_GRID_STRIDE(i, n) st(out, i, ld(x, i));
}

}  // namespace

void convert(Out out, In x, int64_t n) {
  if (n <= 0) return;
  launch("convert", convert_kernel, grid_for(n), kThreads, 0, out, x, n);
}

namespace {

__global__ void add_kernel(Out out, In a, In b, float alpha, float beta, int64_t n) {
  NL_GRID_STRIDE(i, n) st(out, i, alpha * ld(a, i) + beta * ld(b, i));
}

}  // namespace

void add(Out out, In a, In b, float alpha, float beta, int64_t n) {
  if (n <= 0) return;
  launch("add", add_kernel, grid_for(n), kThreads, 0, out, a, b, alpha, beta, n);
}

namespace {

__global__ void accumulate_kernel(Out dst, In src, int64_t n) {
  NL_GRID_STRIDE(i, n) st(dst, i, ld(dst, i) + ld(src, i));
}

}  // namespace

void accumulate(Out dst, In src, int64_t n) {
  if (n <= 0) return;
  launch("accumulate", accumulate_kernel, grid_for(n), kThreads, 0, dst, src, n);
}

namespace {

__global__ void scale_kernel(Out out, In x, float alpha, int64_t n) {
  NL_GRID_STRIDE(i, n) st(out, i, alpha * ld(x, i));
}

}  // namespace

void scale(Out out, In x, float alpha, int64_t n) {
  if (n <= 0) return;
  launch("scale", scale_kernel, grid_for(n), kThreads, 0, out, x, alpha, n);
}

namespace {

__global__ void dropout_kernel(Out y, In x, int64_t n, DropoutMask mask, float keep) {
  NL_GRID_STRIDE(i, n) st(y, i, mask.keeps(static_cast<uint64_t>(i)) ? ld(x, i) * keep : 0.0f);
}

}  // namespace

void dropout(Out y, In x, int64_t n, const DropoutMask& mask) {
  if (n <= 0) return;
  const float keep = static_cast<float>(mask.keep_scale());
  launch("dropout", dropout_kernel, grid_for(n), kThreads, 0, y, x, n, mask, keep);
}

namespace {

__global__ void round_to_bf16_kernel(float* x, int64_t n) {
  NL_GRID_STRIDE(i, n) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
}
__global__ void round_to_fp16_kernel(float* x, int64_t n) {
  NL_GRID_STRIDE(i, n) x[i] = __half2float(__float2half_rn(x[i]));
}

}  // namespace

void round_to_format(float* x, int64_t n, bool bf16) {
  if (n <= 0) return;
  if (bf16) {
    launch("round_to_format", round_to_bf16_kernel, grid_for(n), kThreads, 0, x, n);
  } else {
    launch("round_to_format", round_to_fp16_kernel, grid_for(n), kThreads, 0, x, n);
  }
}

namespace {

__global__ void mul_kernel(Out out, In a, In b, int64_t n) {
  NL_GRID_STRIDE(i, n) st(out, i, ld(a, i) * ld(b, i));
}

}  // namespace

void mul(Out out, In a, In b, int64_t n) {
  if (n <= 0) return;
  launch("mul", mul_kernel, grid_for(n), kThreads, 0, out, a, b, n);
}

namespace {

__global__ void gelu_kernel(Out y, float* dydx, In x, int64_t n) {
  const float inv_sqrt2 = 0.70710678118654752440f;
  const float inv_sqrt_2pi = 0.39894228040143267794f;
  NL_GRID_STRIDE(i, n) {
    const float xi = ld(x, i);
    const float cdf = 0.5f * (1.0f + erff(xi * inv_sqrt2));
    st(y, i, xi * cdf);
    if (dydx) dydx[i] = cdf + xi * inv_sqrt_2pi * expf(-0.5f * xi * xi);
  }
}

}  // namespace

void gelu_forward(Out y, float* dydx, In x, int64_t n) {
  if (n <= 0) return;
  launch("gelu_forward", gelu_kernel, grid_for(n), kThreads, 0, y, dydx, x, n);
}

namespace {

constexpr int kSumSquaresBlocks = 1024;

__global__ void sum_squares_partial_kernel(double* partial, In x, int64_t n) {
  NL_SHARED_ARRAY(double, scratch, 32);
  double acc = 0.0;
  NL_GRID_STRIDE(i, n) {
    const double v = ld(x, i);
    acc += v * v;
  }
  acc = block_sum_d(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void sum_partials_kernel(double* result, const double* partial, int64_t count) {
  NL_SHARED_ARRAY(double, scratch, 32);
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum_d(acc, scratch);
  if (threadIdx.x == 0) result[0] = acc;
}

}  // namespace

int64_t sum_squares_work(int64_t) { return kSumSquaresBlocks; }

namespace {

constexpr int kCensusBlocks = 256;

// Each block's {nonfinite, overflow, underflow, max |finite|} into partial[4 * block + k].
__global__ void format_census_partial_kernel(double* partial, In x, int64_t n, int format) {
  NL_SHARED_ARRAY(double, scratch, 32);
  double nonfinite = 0, overflow = 0, underflow = 0, max_abs = 0;
  NL_GRID_STRIDE(i, n) {
    const float v = ld(x, i);
    if (!(fabsf(v) < INFINITY)) {  // inf or NaN
      nonfinite += 1;
      continue;
    }
    max_abs = fmax(max_abs, static_cast<double>(fabsf(v)));
    const float r = stored_as(v, format);
    if (fabsf(r) == INFINITY) overflow += 1;
    else if (r == 0.0f && v != 0.0f) underflow += 1;
  }
  nonfinite = block_sum_d(nonfinite, scratch);
  overflow = block_sum_d(overflow, scratch);
  underflow = block_sum_d(underflow, scratch);
  max_abs = block_max_d(max_abs, scratch);
  if (threadIdx.x == 0) {
    double* p = partial + 4 * static_cast<int64_t>(blockIdx.x);
    p[0] = nonfinite;
    p[1] = overflow;
    p[2] = underflow;
    p[3] = max_abs;
  }
}

__global__ void format_census_total_kernel(double* result, const double* partial, int64_t blocks) {
  NL_SHARED_ARRAY(double, scratch, 32);
  double acc[3] = {0, 0, 0}, max_abs = 0;
  for (int64_t b = threadIdx.x; b < blocks; b += blockDim.x) {
    for (int k = 0; k < 3; ++k) acc[k] += partial[4 * b + k];
    max_abs = fmax(max_abs, partial[4 * b + 3]);
  }
  for (int k = 0; k < 3; ++k) {
    const double total = block_sum_d(acc[k], scratch);
    if (threadIdx.x == 0) result[k] = total;
  }
  max_abs = block_max_d(max_abs, scratch);
  if (threadIdx.x == 0) result[3] = max_abs;
}

}  // namespace

int64_t format_census_work(int64_t) { return 4 * kCensusBlocks; }

void format_census(double* result_dev, double* work, In x, int64_t n, int format) {
  const int blocks = n <= 0 ? 1 : std::min(kCensusBlocks, grid_for(n));
  launch("format_census", format_census_partial_kernel, blocks, kThreads, 0, work, x, n < 0 ? 0 : n, format);
  launch("format_census", format_census_total_kernel, 1, kThreads, 0, result_dev, work, blocks);
}

void sum_squares(double* result_dev, double* work, In x, int64_t n) {
  const int blocks = n <= 0 ? 1 : std::min(kSumSquaresBlocks, grid_for(n));
  launch("sum_squares", sum_squares_partial_kernel, blocks, kThreads, 0, work, x, n < 0 ? 0 : n);
  launch("sum_squares", sum_partials_kernel, 1, kThreads, 0, result_dev, work, blocks);
}

namespace {

__global__ void bias_residual_kernel(float* out, const float* bias, const float* residual,
                                     int64_t m, int64_t n) {
  NL_GRID_STRIDE(i, m * n) {
    float v = residual ? residual[i] : 0.0f;
    if (bias) v += bias[i % n];
    out[i] = v;
  }
}

}  // namespace

void bias_residual_init(float* out, const float* bias, const float* residual, int64_t m, int64_t n) {
  if (m * n <= 0) return;
  launch("linear_forward", bias_residual_kernel, grid_for(m * n), kThreads, 0, out, bias, residual, m, n);
}

namespace {

__global__ void linear_epilogue_kernel(Out out, const float* product, In bias, In residual, int64_t m, int64_t n) {
  NL_GRID_STRIDE(i, m * n) {
    float v = residual ? ld(residual, i) : 0.0f;
    if (bias) v += ld(bias, i % n);
    st(out, i, v + product[i]);
  }
}

}  // namespace

void linear_epilogue(Out out, const float* product, In bias, In residual, int64_t m, int64_t n) {
  if (m * n <= 0) return;
  launch("linear_forward", linear_epilogue_kernel, grid_for(m * n), kThreads, 0, out, product, bias, residual, m, n);
}

namespace {

__global__ void adam_kernel(float* param, float* m, float* v, const float* grad, int64_t n,
                            float lr, float b1, float omb1, float b2, float omb2, float eps,
                            float inv_bc1, float inv_bc2, float wd_l2, float wd_decoupled) {
  NL_GRID_STRIDE(i, n) {
    const float p = param[i];
    const float g = fmaf(wd_l2, p, grad[i]);
    const float mi = fmaf(b1, m[i], omb1 * g);
    const float vi = fmaf(b2, v[i], omb2 * g * g);
    const float update = fmaf(wd_decoupled, p, (mi * inv_bc1) / (sqrtf(vi * inv_bc2) + eps));
    param[i] = fmaf(-lr, update, p);
    m[i] = mi;
    v[i] = vi;
  }
}

}  // namespace

void adam_step(float* param, float* m, float* v, const float* grad, int64_t n, float lr,
               float beta1, float beta2, float eps, float inv_bc1, float inv_bc2, float wd_l2,
               float wd_decoupled) {
  if (n <= 0) return;
  launch("adam_step", adam_kernel, grid_for(n), kThreads, 0, param, m, v, grad, n, lr, beta1, 1.0f - beta1, beta2,
         1.0f - beta2, eps, inv_bc1, inv_bc2, wd_l2, wd_decoupled);
}

}  // namespace normlab::cuda
