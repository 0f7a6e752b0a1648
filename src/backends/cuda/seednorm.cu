// SeeDNorm (Cai et al. 2025): y = (gamma + alpha * tanh(x . beta)) * x * rstd, one block per row for
// the row's two sums. Backward: one block per row writes dx and the row's u (the gradient reaching
// x . beta); then per-chunk column partial sums of dy*xhat, t*dy*xhat and u*x (block (32, 8) over 32
// columns of a chunk of rows, as squash.cu), added by column_final in order: deterministic, no
// atomics. Arrays of any storage (In / Out), statistics and parameter gradients float32.
#include "columns.h"
#include "flavor.h"
#include "normlab/seednorm_kernel.h"
#include "tensor_args.h"

namespace normlab::cuda {

namespace {

constexpr int kColX = 32, kColY = 8;

// One block per row: x . x and x . beta, then y; rstd and t = tanh(x . beta) saved.
__global__ void seednorm_forward_kernel(Out y, float* rstd, float* t, In x, In gamma, In alpha, In beta, int64_t d,
                                        float eps) {
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * d;
  float ss = 0.0f, s = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float v = ld(x, row + j);
    ss += v * v;
    s += v * ld(beta, j);
  }
  ss = block_sum(ss, scratch);
  s = block_sum(s, scratch);
  const float r = rsqrtf(ss / static_cast<float>(d) + eps), th = tanhf(s);
  if (threadIdx.x == 0) {
    rstd[blockIdx.x] = r;
    t[blockIdx.x] = th;
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    st(y, row + j, (ld(gamma, j) + ld(alpha, j) * th) * ld(x, row + j) * r);
}

// One block per row: mean(c*g*xhat) and sum(g*alpha*xhat), c = gamma + alpha*t; u = (1 - t^2) *
// the latter (saved for dbeta); dx = rstd*(c*g - xhat*mean) + u*beta where wanted.
__global__ void seednorm_dx_kernel(Out dx, float* u_rows, In dy, In x, In gamma, In alpha, In beta, const float* rstd,
                                   const float* t, int64_t d) {
  NL_SHARED_ARRAY(float, scratch, 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * d;
  const float r = rstd[blockIdx.x], th = t[blockIdx.x];
  float m = 0.0f, ga = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float xhat = ld(x, row + j) * r, g = ld(dy, row + j), a = ld(alpha, j);
    m += (ld(gamma, j) + a * th) * g * xhat;
    ga += g * a * xhat;
  }
  m = block_sum(m, scratch) / static_cast<float>(d);
  ga = block_sum(ga, scratch);
  const float u = (1.0f - th * th) * ga;
  if (threadIdx.x == 0) u_rows[blockIdx.x] = u;
  if (!dx) return;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    const float xhat = ld(x, row + j) * r, g = ld(dy, row + j);
    st(dx, row + j, r * ((ld(gamma, j) + ld(alpha, j) * th) * g - xhat * m) + u * ld(beta, j));
  }
}

// Chunk blockIdx.y of rows, columns blockIdx.x*32 + tx: partial sums of dy*xhat, t*dy*xhat and u*x per
// (chunk, column), the 8 rows' threads added in order of ty.
__global__ void seednorm_partial_kernel(float* part_g, float* part_a, float* part_b, In dy, In x, const float* rstd,
                                        const float* t, const float* u_rows, int64_t rows, int64_t cols,
                                        int64_t rows_per_chunk) {
  NL_SHARED_ARRAY2(float, sg, kColY, kColX + 1);
  NL_SHARED_ARRAY2(float, sa, kColY, kColX + 1);
  NL_SHARED_ARRAY2(float, sb, kColY, kColX + 1);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kColX + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float ag = 0.0f, aa = 0.0f, ab = 0.0f;
  if (j < cols)
    for (int64_t i = r0 + ty; i < r1; i += kColY) {
      const int64_t e = i * cols + j;
      const float xv = ld(x, e), gx = ld(dy, e) * xv * rstd[i];
      ag += gx;
      aa += t[i] * gx;
      ab += u_rows[i] * xv;
    }
  sg[ty][tx] = ag;
  sa[ty][tx] = aa;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && j < cols) {
    float tg = 0.0f, ta = 0.0f, tb = 0.0f;
    for (int k = 0; k < kColY; ++k) {
      tg += sg[k][tx];
      ta += sa[k][tx];
      tb += sb[k][tx];
    }
    const int64_t at = static_cast<int64_t>(blockIdx.y) * cols + j;
    part_g[at] = tg;
    part_a[at] = ta;
    part_b[at] = tb;
  }
}

int64_t seednorm_work(int64_t rows, int64_t cols) {
  int64_t rpc = 0;
  return 3 * column_chunks(rows, rpc) * cols + rows;
}

void seednorm_forward(Out y, float* rstd, float* t, In x, In gamma, In alpha, In beta, int64_t n, int64_t d,
                      float eps) {
  if (n == 0 || d == 0) return;
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "seednorm_forward");
  launch("seednorm_forward", seednorm_forward_kernel, static_cast<int>(n), row_threads(d), 0, y, rstd, t, x, gamma,
         alpha, beta, d, eps);
}

void seednorm_backward(Out dx, float* dgamma, float* dalpha, float* dbeta, In dy, In x, In gamma, In alpha, In beta,
                       const float* rstd, const float* t, int64_t n, int64_t d, float* work) {
  if (d == 0) return;
  if (n == 0) {
    for (float* g : {dgamma, dalpha, dbeta})
      if (g) fill_f32(g, d, 0.0f);
    return;
  }
  if (!rows_fit(n)) check(cudaErrorInvalidConfiguration, "grid of one block per row", "seednorm_backward");
  int64_t rpc = 0;
  const int64_t chunks = column_chunks(n, rpc);
  float* part_g = work;
  float* part_a = part_g + chunks * d;
  float* part_b = part_a + chunks * d;
  float* u_rows = part_b + chunks * d;
  launch("seednorm_backward", seednorm_dx_kernel, static_cast<int>(n), row_threads(d), 0, dx, u_rows, dy, x, gamma,
         alpha, beta, rstd, t, d);
  if (!dgamma && !dalpha && !dbeta) return;
  const dim3 grid(static_cast<unsigned>((d + kColX - 1) / kColX), static_cast<unsigned>(chunks));
  launch("seednorm_backward", seednorm_partial_kernel, grid, dim3(kColX, kColY), 0, part_g, part_a, part_b, dy, x,
         rstd, t, u_rows, n, d, rpc);
  if (dgamma || dalpha) column_final(dgamma, dalpha, part_g, part_a, chunks, d, "seednorm_backward");
  if (dbeta) column_final(dbeta, nullptr, part_b, nullptr, chunks, d, "seednorm_backward");
}

void forward(Backend&, const SeedNormForward& a) {
  expect_all(a.kName, {{"y", &a.y}, {"x", &a.x}, {"gamma", &a.gamma}, {"alpha", &a.alpha}, {"beta", &a.beta}});
  expect_f32(a.kName, "rstd", a.rstd);
  expect_f32(a.kName, "t", a.t);
  seednorm_forward(arr_out(a.y), fp(a.rstd), fp(a.t), arr_in(a.x), arr_in(a.gamma), arr_in(a.alpha), arr_in(a.beta),
                   a.n, a.d, static_cast<float>(a.eps));
}

void backward(Backend& b, const SeedNormBackward& a) {
  expect_all(a.kName, {{"dx", a.dx}, {"dy", &a.dy}, {"x", &a.x}, {"gamma", &a.gamma}, {"alpha", &a.alpha},
                        {"beta", &a.beta}, {"dgamma", a.dgamma}, {"dalpha", a.dalpha}, {"dbeta", a.dbeta}});
  expect_f32(a.kName, "rstd", a.rstd);
  expect_f32(a.kName, "t", a.t);
  F32Out dg(a.dgamma), da(a.dalpha), db(a.dbeta);
  float* work = work_floats(b, seednorm_work(a.n, a.d), a.kName);
  seednorm_backward(arr_out(a.dx), dg.get(), da.get(), db.get(), arr_in(a.dy), arr_in(a.x), arr_in(a.gamma),
                    arr_in(a.alpha), arr_in(a.beta), fp(a.rstd), fp(a.t), a.n, a.d, work);
  dg.finish();
  da.finish();
  db.finish();
}

}  // namespace

NORMLAB_KERNEL(SeedNormForward, kBackendName, forward);
NORMLAB_KERNEL(SeedNormBackward, kBackendName, backward);

}  // namespace normlab::cuda
