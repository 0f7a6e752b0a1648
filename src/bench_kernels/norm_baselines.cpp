// The naive baselines of the norm kernels, for `bench norms` and as cross-checks in the tests: one
// sweep over the whole tensor per step, plain loops, as a first version would be written. The
// backend never calls them (its kernels are norm_kernels.cpp's).
#include <cmath>
#include <vector>

#include "normlab/bench_kernels.h"
#include "normlab/cpu_kernels.h"
#include "norm_stats.h"
#include "parallel.h"

namespace normlab::cpu {

void layernorm_forward_multipass(float* y, float* mean, float* rstd, const float* x,
                                 const float* gamma, const float* beta, int64_t n, int64_t d,
                                 float eps) {
  if (d <= 0) return;
  parallel_for(n, n * d, [&](int64_t i) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; ++j) s += x[i * d + j];
    mean[i] = mean_from(0.0f, s, 1.0f / float(d));  // not shifted: the naive sum
  });
  parallel_for(n, n * d, [&](int64_t i) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; ++j) s += (x[i * d + j] - mean[i]) * (x[i * d + j] - mean[i]);
    rstd[i] = rstd_from(s, 1.0f / float(d), eps);
  });
  parallel_for(n, n * d, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j)
      y[i * d + j] = (x[i * d + j] - mean[i]) * rstd[i] * gamma[j] + beta[j];
  });
}

void layernorm_backward_multipass(float* dx, float* dgamma, float* dbeta, const float* dy,
                                  const float* x, const float* gamma, const float* mean,
                                  const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (dx) {
    std::vector<float> mg(static_cast<size_t>(n)), mgx(static_cast<size_t>(n));
    parallel_for(n, n * d, [&](int64_t i) {
      float sg = 0.0f, sgx = 0.0f;
      for (int64_t j = 0; j < d; ++j) {
        float g = dy[i * d + j] * gamma[j];
        sg += g;
        sgx += g * (x[i * d + j] - mean[i]) * rstd[i];
      }
      mg[static_cast<size_t>(i)] = sg / float(d);
      mgx[static_cast<size_t>(i)] = sgx / float(d);
    });
    parallel_for(n, n * d, [&](int64_t i) {
      for (int64_t j = 0; j < d; ++j) {
        float xhat = (x[i * d + j] - mean[i]) * rstd[i];
        dx[i * d + j] = rstd[i] * (dy[i * d + j] * gamma[j] - mg[static_cast<size_t>(i)] -
                                   xhat * mgx[static_cast<size_t>(i)]);
      }
    });
  }
  if (dgamma || dbeta) {
    // Threads own column ranges and walk the rows in order (a column at a time would stride
    // through memory d floats per step).
    parallel_chunks(d, n * d, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        if (dgamma) dgamma[j] = 0.0f;
        if (dbeta) dbeta[j] = 0.0f;
      }
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = lo; j < hi; ++j) {
          if (dgamma) dgamma[j] += dy[i * d + j] * (x[i * d + j] - mean[i]) * rstd[i];
          if (dbeta) dbeta[j] += dy[i * d + j];
        }
      }
    });
  }
}

void rmsnorm_forward_multipass(float* y, float* rstd, const float* x, const float* gamma, int64_t n,
                               int64_t d, float eps) {
  if (d <= 0) return;
  parallel_for(n, n * d, [&](int64_t i) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; ++j) s += x[i * d + j] * x[i * d + j];
    rstd[i] = rstd_from(s, 1.0f / float(d), eps);
  });
  parallel_for(n, n * d, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = x[i * d + j] * rstd[i] * gamma[j];
  });
}

void rmsnorm_backward_multipass(float* dx, float* dgamma, const float* dy, const float* x,
                                const float* gamma, const float* rstd, int64_t n, int64_t d) {
  if (d <= 0) return;
  if (dx) {
    std::vector<float> mgx(static_cast<size_t>(n));
    parallel_for(n, n * d, [&](int64_t i) {
      float s = 0.0f;
      for (int64_t j = 0; j < d; ++j) s += dy[i * d + j] * gamma[j] * x[i * d + j] * rstd[i];
      mgx[static_cast<size_t>(i)] = s / float(d);
    });
    parallel_for(n, n * d, [&](int64_t i) {
      for (int64_t j = 0; j < d; ++j)
        dx[i * d + j] = rstd[i] * (dy[i * d + j] * gamma[j] -
                                   x[i * d + j] * rstd[i] * mgx[static_cast<size_t>(i)]);
    });
  }
  if (dgamma) {
    parallel_chunks(d, n * d, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) dgamma[j] = 0.0f;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = lo; j < hi; ++j) dgamma[j] += dy[i * d + j] * x[i * d + j] * rstd[i];
    });
  }
}

// DyT as a framework evaluates it op by op: u = alpha*x, t = tanh(u), y = gamma*t + beta, each a
// sweep over the tensor (libm's tanhf, not vectorized).
void dyt_forward_multipass(float* y, const float* x, float alpha, const float* gamma, const float* beta, int64_t n,
                           int64_t d) {
  if (d <= 0) return;
  parallel_for(n, n * d, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = alpha * x[i * d + j];
  });
  parallel_for(n, n * d * 8, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = std::tanh(y[i * d + j]);
  });
  parallel_for(n, n * d, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j) y[i * d + j] = gamma[j] * y[i * d + j] + (beta ? beta[j] : 0.0f);
  });
}

// The backward as autograd would run it: t recomputed, h = dy*gamma*(1 - t^2) a tensor, then dx,
// the parameter sums (columns: one thread per range of columns, rows in order) and dalpha.
void dyt_backward_multipass(float* dx, float* dalpha, float* dgamma, float* dbeta, const float* dy, const float* x,
                            float alpha, const float* gamma, int64_t n, int64_t d) {
  if (d <= 0) return;
  std::vector<float> t(static_cast<size_t>(n * d)), h(static_cast<size_t>(n * d));
  parallel_for(n, n * d * 8, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j) t[static_cast<size_t>(i * d + j)] = std::tanh(alpha * x[i * d + j]);
  });
  parallel_for(n, n * d, [&](int64_t i) {
    for (int64_t j = 0; j < d; ++j) {
      const size_t e = static_cast<size_t>(i * d + j);
      h[e] = dy[e] * gamma[j] * (1.0f - t[e] * t[e]);
    }
  });
  if (dx)
    parallel_for(n, n * d, [&](int64_t i) {
      for (int64_t j = 0; j < d; ++j) dx[i * d + j] = alpha * h[static_cast<size_t>(i * d + j)];
    });
  if (dgamma || dbeta) {
    parallel_chunks(d, n * d, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {
        if (dgamma) dgamma[j] = 0.0f;
        if (dbeta) dbeta[j] = 0.0f;
      }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = lo; j < hi; ++j) {
          if (dgamma) dgamma[j] += dy[i * d + j] * t[static_cast<size_t>(i * d + j)];
          if (dbeta) dbeta[j] += dy[i * d + j];
        }
    });
  }
  if (dalpha) {
    double s = 0.0;
    for (int64_t e = 0; e < n * d; ++e) s += double(x[e]) * h[static_cast<size_t>(e)];
    *dalpha = static_cast<float>(s);
  }
}

}  // namespace normlab::cpu
