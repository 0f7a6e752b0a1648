// The elementwise normalizers DyT (tanh) and Derf (erf), y = gamma * f(alpha*x + shift) + beta, and
// the channel scale y = x * lambda (ReZero, SkipInit, LayerScale). Forward: one grid-stride pass.
// Backward: one pass writes dx and per-chunk column partial sums (block (32, 8) over 32 columns of
// a chunk of rows, as columns.cu), then column_final adds the chunks in order, and the full sums
// (dalpha, dshift, a scalar lambda's gradient) add the columns in order: deterministic, no atomics.
#include "columns.h"
#include "flavor.h"
#include "normlab/channel_scale_kernels.h"
#include "normlab/squash_kernels.h"
#include "tensor_args.h"

namespace normlab::cuda {

namespace {

constexpr int kColX = 32, kColY = 8;

// f(u) for f = tanh (0) or erf (1), and f'(u) from u and t = f(u).
__device__ inline float squash_f(int f, float u) { return f == 0 ? tanhf(u) : erff(u); }
__device__ inline float squash_slope(int f, float u, float t) {
  return f == 0 ? 1.0f - t * t : 1.1283791670955126f * expf(-u * u);  // 2/sqrt(pi)
}

__global__ void squash_forward_kernel(Out y, In x, In alpha, In shift, In gamma, In beta, int64_t n, int64_t d,
                                      int f) {
  const float a = ld(alpha, 0), s = shift ? ld(shift, 0) : 0.0f;
  NL_GRID_STRIDE(i, n * d) {
    const int64_t j = i % d;
    const float t = squash_f(f, a * ld(x, i) + s);
    st(y, i, ld(gamma, j) * t + (beta ? ld(beta, j) : 0.0f));
  }
}

// Chunk blockIdx.y of rows, columns blockIdx.x*32 + tx: dx written; partial sums of dy*f(u), dy,
// x*h and h (h = dy*gamma*f'(u)) per (chunk, column), the 8 rows' threads added in order of ty.
__global__ void squash_backward_kernel(Out dx, float* part_g, float* part_b, float* part_a, float* part_s, In dy, In x,
                                       In alpha, In shift, In gamma, int64_t rows, int64_t cols, int64_t rows_per_chunk,
                                       int f) {
  NL_SHARED_ARRAY2(float, sg, kColY, kColX + 1);
  NL_SHARED_ARRAY2(float, sb, kColY, kColX + 1);
  NL_SHARED_ARRAY2(float, sa, kColY, kColX + 1);
  NL_SHARED_ARRAY2(float, ss, kColY, kColX + 1);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColX + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  const float a = ld(alpha, 0), s = shift ? ld(shift, 0) : 0.0f;
  float ag = 0.0f, ab = 0.0f, aa = 0.0f, as = 0.0f;
  if (j < cols) {
    const float gj = ld(gamma, j);
    for (int64_t i = r0 + ty; i < r1; i += kColY) {
      const int64_t e = i * cols + j;
      const float xv = ld(x, e), g = ld(dy, e);
      const float u = a * xv + s;
      const float t = squash_f(f, u);
      const float h = g * gj * squash_slope(f, u, t);
      if (dx) st(dx, e, a * h);
      ag += g * t;
      ab += g;
      aa += xv * h;
      as += h;
    }
  }
  sg[ty][tx] = ag;
  sb[ty][tx] = ab;
  sa[ty][tx] = aa;
  ss[ty][tx] = as;
  __syncthreads();
  if (ty == 0 && j < cols) {
    float tg = 0.0f, tb = 0.0f, ta = 0.0f, ts = 0.0f;
    for (int k = 0; k < kColY; ++k) {
      tg += sg[k][tx];
      tb += sb[k][tx];
      ta += sa[k][tx];
      ts += ss[k][tx];
    }
    const int64_t at = static_cast<int64_t>(blockIdx.y) * cols + j;
    part_g[at] = tg;
    part_b[at] = tb;
    part_a[at] = ta;
    part_s[at] = ts;
  }
}

// out_a[0] = sum over j of col_a[j] in order (double), the same for s (nullable outputs).
__global__ void sum_columns_kernel(float* out_a, float* out_s, const float* col_a, const float* col_s, int64_t cols) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double ta = 0.0, ts = 0.0;
  for (int64_t j = 0; j < cols; ++j) {
    ta += col_a[j];
    if (col_s) ts += col_s[j];
  }
  if (out_a) out_a[0] = static_cast<float>(ta);
  if (out_s) out_s[0] = static_cast<float>(ts);
}

__global__ void channel_scale_forward_kernel(Out y, In x, In lambda, int64_t n, int64_t d, int64_t c) {
  NL_GRID_STRIDE(i, n * d) st(y, i, ld(x, i) * ld(lambda, c == 1 ? 0 : i % d));
}

__global__ void channel_scale_dx_kernel(Out dx, In dy, In lambda, int64_t n, int64_t d, int64_t c) {
  NL_GRID_STRIDE(i, n * d) st(dx, i, ld(dy, i) * ld(lambda, c == 1 ? 0 : i % d));
}

// Partial sums of dy*x per (chunk, column), as squash_backward_kernel's.
__global__ void product_partial_kernel(float* part, In dy, In x, int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  NL_SHARED_ARRAY2(float, sp, kColY, kColX + 1);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColX + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.0f;
  if (j < cols)
    for (int64_t i = r0 + ty; i < r1; i += kColY) acc += ld(dy, i * cols + j) * ld(x, i * cols + j);
  sp[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && j < cols) {
    float t = 0.0f;
    for (int k = 0; k < kColY; ++k) t += sp[k][tx];
    part[static_cast<int64_t>(blockIdx.y) * cols + j] = t;
  }
}

}  // namespace

int64_t squash_work(int64_t rows, int64_t cols) {
  int64_t rpc = 0;
  return (4 * column_chunks(rows, rpc) + 2) * cols;
}

void squash_forward(Out y, In x, In alpha, In shift, In gamma, In beta, int64_t n, int64_t d, int f) {
  if (n * d == 0) return;
  launch("squash_forward", squash_forward_kernel, grid_for(n * d), kThreads, 0, y, x, alpha, shift, gamma, beta, n, d,
         f);
}

void squash_backward(Out dx, float* dalpha, float* dshift, float* dgamma, float* dbeta, In dy, In x, In alpha, In shift,
                     In gamma, int64_t n, int64_t d, int f, float* work) {
  const char* name = "squash_backward";
  if (d == 0) return;
  if (n == 0) {
    if (dgamma) fill_f32(dgamma, d, 0.0f);
    if (dbeta) fill_f32(dbeta, d, 0.0f);
    if (dalpha) fill_f32(dalpha, 1, 0.0f);
    if (dshift) fill_f32(dshift, 1, 0.0f);
    return;
  }
  int64_t rpc = 0;
  const int64_t chunks = column_chunks(n, rpc);
  float* part_g = work;
  float* part_b = part_g + chunks * d;
  float* part_a = part_b + chunks * d;
  float* part_s = part_a + chunks * d;
  float* col_a = part_s + chunks * d;
  float* col_s = col_a + d;
  dim3 block(kColX, kColY);
  dim3 grid(static_cast<unsigned>((d + kColX - 1) / kColX), static_cast<unsigned>(chunks));
  launch(name, squash_backward_kernel, grid, block, 0, dx, part_g, part_b, part_a, part_s, dy, x, alpha, shift, gamma,
         n, d, rpc, f);
  if (dgamma || dbeta) column_final(dgamma, dbeta, part_g, dbeta ? part_b : nullptr, chunks, d, name);
  if (dalpha || dshift) {
    column_final(col_a, col_s, part_a, part_s, chunks, d, name);
    launch(name, sum_columns_kernel, 1, 1, 0, dalpha, dshift, static_cast<const float*>(col_a),
           static_cast<const float*>(col_s), d);
  }
}

int64_t channel_scale_work(int64_t rows, int64_t cols) {
  int64_t rpc = 0;
  return (column_chunks(rows, rpc) + 1) * cols;
}

void channel_scale_forward(Out y, In x, In lambda, int64_t n, int64_t d, int64_t c) {
  if (n * d == 0) return;
  launch("channel_scale_forward", channel_scale_forward_kernel, grid_for(n * d), kThreads, 0, y, x, lambda, n, d, c);
}

void channel_scale_backward(Out dx, float* dlambda, In dy, In x, In lambda, int64_t n, int64_t d, int64_t c,
                            float* work) {
  const char* name = "channel_scale_backward";
  if (dx && n * d > 0) launch(name, channel_scale_dx_kernel, grid_for(n * d), kThreads, 0, dx, dy, lambda, n, d, c);
  if (!dlambda || d == 0) return;
  if (n == 0) {
    fill_f32(dlambda, c, 0.0f);
    return;
  }
  int64_t rpc = 0;
  const int64_t chunks = column_chunks(n, rpc);
  float* part = work;
  float* col = part + chunks * d;
  dim3 block(kColX, kColY);
  dim3 grid(static_cast<unsigned>((d + kColX - 1) / kColX), static_cast<unsigned>(chunks));
  launch(name, product_partial_kernel, grid, block, 0, part, dy, x, n, d, rpc);
  if (c == d) {
    column_final(dlambda, nullptr, part, nullptr, chunks, d, name);
    return;
  }
  column_final(col, nullptr, part, nullptr, chunks, d, name);
  launch(name, sum_columns_kernel, 1, 1, 0, dlambda, static_cast<float*>(nullptr), static_cast<const float*>(col),
         static_cast<const float*>(nullptr), d);
}

// ---- the Backend's kernels (squash_kernels.h, channel_scale_kernels.h) on the device

namespace {

void call_squash_forward(Backend&, const SquashForward& a) {
  const char* kn = "squash_forward";
  expect_all(kn, {{"y", &a.y}, {"x", &a.x}, {"alpha", &a.alpha}, {"shift", &a.shift}, {"gamma", &a.gamma},
                  {"beta", &a.beta}});
  squash_forward(arr_out(a.y), arr_in(a.x), arr_in(a.alpha), arr_in(a.shift), arr_in(a.gamma), arr_in(a.beta), a.n, a.d,
                 a.f == Squash::tanh ? 0 : 1);
}

void call_squash_backward(Backend& self, const SquashBackward& a) {
  const char* kn = "squash_backward";
  expect_all(kn, {{"dx", a.dx}, {"dalpha", a.dalpha}, {"dshift", a.dshift}, {"dgamma", a.dgamma}, {"dbeta", a.dbeta},
                  {"dy", &a.dy}, {"x", &a.x}, {"alpha", &a.alpha}, {"shift", &a.shift}, {"gamma", &a.gamma}});
  if (!a.dx && !a.dalpha && !a.dshift && !a.dgamma && !a.dbeta) return;
  F32Out da(a.dalpha), ds(a.dshift), dg(a.dgamma), db(a.dbeta);
  float* work = work_floats(self, squash_work(a.n, a.d), kn);
  squash_backward(arr_out(a.dx), da.get(), ds.get(), dg.get(), db.get(), arr_in(a.dy), arr_in(a.x), arr_in(a.alpha),
                  arr_in(a.shift), arr_in(a.gamma), a.n, a.d, a.f == Squash::tanh ? 0 : 1, work);
  da.finish();
  ds.finish();
  dg.finish();
  db.finish();
}

void call_channel_scale_forward(Backend&, const ChannelScaleForward& a) {
  const char* kn = "channel_scale_forward";
  expect_all(kn, {{"y", &a.y}, {"x", &a.x}, {"lambda", &a.lambda}});
  channel_scale_forward(arr_out(a.y), arr_in(a.x), arr_in(a.lambda), a.n, a.d, a.c);
}

void call_channel_scale_backward(Backend& self, const ChannelScaleBackward& a) {
  const char* kn = "channel_scale_backward";
  expect_all(kn, {{"dx", a.dx}, {"dlambda", a.dlambda}, {"dy", &a.dy}, {"x", &a.x}, {"lambda", &a.lambda}});
  F32Out dl(a.dlambda);
  float* work = a.dlambda ? work_floats(self, channel_scale_work(a.n, a.d), kn) : nullptr;
  channel_scale_backward(arr_out(a.dx), dl.get(), arr_in(a.dy), arr_in(a.x), arr_in(a.lambda), a.n, a.d, a.c, work);
  dl.finish();
}

}  // namespace

NORMLAB_KERNEL(SquashForward, kBackendName, call_squash_forward);
NORMLAB_KERNEL(SquashBackward, kBackendName, call_squash_backward);
NORMLAB_KERNEL(ChannelScaleForward, kBackendName, call_channel_scale_forward);
NORMLAB_KERNEL(ChannelScaleBackward, kBackendName, call_channel_scale_backward);

}  // namespace normlab::cuda
