// Softmax over rows (plain and causal-masked, forward and backward) and the cross-entropy loss
// of the cpu backend. Every softmax subtracts the row max before exp (exp never overflows and
// the result is unchanged); the loss works from log-sum-exp. exp is simd::exp (vectorized,
// ~2 ulp). A NaN or Inf anywhere in a row makes the row's output NaN, as in the reference:
// divergence must show.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels.h"
#include "parallel.h"
#include "simd.h"
#include "normlab/tensor.h"

namespace normlab::cpu {

namespace {

using namespace simd;

// for j < d: mx = max(mx, x[j])
float row_max(const float* x, int64_t d) {
  VF m0 = set1(-std::numeric_limits<float>::infinity()), m1 = m0;
  int64_t j = 0;
  for (; j + 2 * kWidth <= d; j += 2 * kWidth) {
    m0 = max(m0, load(x + j));
    m1 = max(m1, load(x + j + kWidth));
  }
  for (; j + kWidth <= d; j += kWidth) m0 = max(m0, load(x + j));
  float m = reduce_max(max(m0, m1));
  // The tail in scalar: masked lanes would read as 0, which is not neutral for a max.
  for (; j < d; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// y[j] = exp(x[j] - mx) for j < d, returns their sum (y may be x).
float row_exp_sum(float* y, const float* x, float mx, int64_t d) {
  const VF vmx = set1(mx);
  return row_reduce(d, [&](int64_t j, int64_t n) {
    VF e = simd::exp(load_n(x + j, n) - vmx);
    store_n(y + j, e, n);
    return e;
  });
}

// y[j] *= s for j < d
void row_scale(float* y, float s, int64_t d) {
  const VF vs = set1(s);
  row_for(d, [&](int64_t j, int64_t n) { store_n(y + j, load_n(y + j, n) * vs, n); });
}

// for j < d: y[j] = exp(x[j] - max(x)) / sum_k exp(x[k] - max(x))       (y may be x)
void softmax_row(float* y, const float* x, int64_t d) {
  const float mx = row_max(x, d);
  const float sum = row_exp_sum(y, x, mx, d);
  row_scale(y, 1.0f / sum, d);
}

// dx[j] = s * y[j] * (dy[j] - sum_k dy[k]*y[k])          (dx may be dy)
void softmax_backward_row(float* dx, const float* dy, const float* y, float s, int64_t d) {
  const float dot =
      row_reduce(d, [&](int64_t j, int64_t n) { return load_n(dy + j, n) * load_n(y + j, n); });
  const VF vdot = set1(dot), vs = set1(s);
  row_for(d, [&](int64_t j, int64_t n) {
    store_n(dx + j, vs * load_n(y + j, n) * (load_n(dy + j, n) - vdot), n);
  });
}

}  // namespace

void softmax_forward(float* y, const float* x, int64_t n, int64_t d) {
  if (d <= 0) return;
  parallel_for(n, n * d * 4, [&](int64_t i) { softmax_row(y + i * d, x + i * d, d); });
}

void softmax_backward(float* dx, const float* dy, const float* y, int64_t n, int64_t d) {
  if (d <= 0) return;
  parallel_for(n, n * d * 2, [&](int64_t i) {
    softmax_backward_row(dx + i * d, dy + i * d, y + i * d, 1.0f, d);
  });
}

namespace {

constexpr int64_t kBlockRows = 8;  // rows walked side by side

// f(r, j, n) for the vector positions j of rows r < rows of a causal block (row r holds its first
// valid[r] entries, n of them from j: kWidth, or fewer in its tail), position by position across
// the rows: the rows' work overlaps instead of each short row waiting on its own reductions.
// Within a row the positions come in order, so a row's sums add as along the row.
template <class F>
void across_rows(const int64_t* valid, int64_t rows, F&& f) {
  int64_t longest = 0;
  for (int64_t r = 0; r < rows; ++r) longest = std::max(longest, valid[r]);
  for (int64_t j = 0; j < longest; j += kWidth)
    for (int64_t r = 0; r < rows; ++r)
      if (valid[r] > j) f(r, j, std::min(kWidth, valid[r] - j));
}

// Sums of a block's rows in row_accumulate's order (whole vectors alternately into two
// accumulators, a masked tail into the second), so that each equals row_reduce's bit for bit.
struct RowSums {
  VF a0[kBlockRows], a1[kBlockRows];
  explicit RowSums(int64_t rows) {
    for (int64_t r = 0; r < rows; ++r) a0[r] = a1[r] = zero();
  }
  void add(int64_t r, int64_t j, int64_t n, VF x) {
    if (n < kWidth) a1[r] = a1[r] + keep_first(x, n);
    else if ((j / kWidth) % 2 == 1) a1[r] = a1[r] + x;
    else a0[r] = a0[r] + x;
  }
  float sum(int64_t r) const { return reduce_add(a0[r] + a1[r]); }
};

// Query row i of a causal block keeps its entries s <= i, and never more than `width`.
void causal_valid(int64_t* valid, int64_t row0, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r) valid[r] = std::min(row0 + r + 1, width);
}

}  // namespace

// softmax_row's arithmetic row by row (its max, exps, sum and scaling by 1 / sum: the same bits),
// the block's rows side by side.
void causal_softmax_rows(float* p, int64_t ldp, int64_t row0, int64_t rows, int64_t width, float* stats) {
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - r0);
    float* block = p + r0 * ldp;
    int64_t valid[kBlockRows];
    VF vmx[kBlockRows];
    causal_valid(valid, row0 + r0, n, width);
    for (int64_t r = 0; r < n; ++r) {
      stats[2 * (r0 + r)] = row_max(block + r * ldp, valid[r]);
      vmx[r] = set1(stats[2 * (r0 + r)]);
    }
    RowSums sums(n);
    across_rows(valid, n, [&](int64_t r, int64_t j, int64_t w) {
      float* x = block + r * ldp + j;
      const VF e = simd::exp(load_n(x, w) - vmx[r]);
      store_n(x, e, w);
      sums.add(r, j, w, e);
    });
    for (int64_t r = 0; r < n; ++r) {
      float* row = block + r * ldp;
      const float sum = sums.sum(r);
      stats[2 * (r0 + r) + 1] = sum;
      row_scale(row, 1.0f / sum, valid[r]);
      std::fill(row + valid[r], row + width, 0.0f);
    }
  }
}

void causal_probs_rows(float* p, int64_t ldp, int64_t row0, int64_t rows, int64_t width, const float* stats) {
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - r0);
    float* block = p + r0 * ldp;
    int64_t valid[kBlockRows];
    VF vmx[kBlockRows], vinv[kBlockRows];
    causal_valid(valid, row0 + r0, n, width);
    for (int64_t r = 0; r < n; ++r) {
      vmx[r] = set1(stats[2 * (r0 + r)]);
      vinv[r] = set1(1.0f / stats[2 * (r0 + r) + 1]);
    }
    across_rows(valid, n, [&](int64_t r, int64_t j, int64_t w) {
      float* x = block + r * ldp + j;
      store_n(x, simd::exp(load_n(x, w) - vmx[r]) * vinv[r], w);
    });
    for (int64_t r = 0; r < n; ++r) std::fill(block + r * ldp + valid[r], block + r * ldp + width, 0.0f);
  }
}

// softmax_backward_row's arithmetic (the same bits), the block's rows side by side.
void causal_softmax_backward_rows(float* dp, const float* p, int64_t rows, int64_t width, int64_t row0, float scale) {
  const VF vs = set1(scale);
  for (int64_t r0 = 0; r0 < rows; r0 += kBlockRows) {
    const int64_t n = std::min(kBlockRows, rows - r0);
    float* block = dp + r0 * width;
    const float* pb = p + r0 * width;
    int64_t valid[kBlockRows];
    causal_valid(valid, row0 + r0, n, width);
    RowSums dots(n);
    across_rows(valid, n, [&](int64_t r, int64_t j, int64_t w) {
      dots.add(r, j, w, load_n(block + r * width + j, w) * load_n(pb + r * width + j, w));
    });
    VF vdot[kBlockRows];
    for (int64_t r = 0; r < n; ++r) vdot[r] = set1(dots.sum(r));
    across_rows(valid, n, [&](int64_t r, int64_t j, int64_t w) {
      float* x = block + r * width + j;
      store_n(x, vs * load_n(pb + r * width + j, w) * (load_n(x, w) - vdot[r]), w);
    });
    for (int64_t r = 0; r < n; ++r) std::fill(block + r * width + valid[r], block + (r + 1) * width, 0.0f);
  }
}

// Per row i: lse = mx + log(sum_j exp(x[j] - mx)); probs[j] = exp(x[j] - mx) / sum;
// loss_i = lse - x[target]; loss = mean_i loss_i, summed in double in row order.
void cross_entropy_forward(float* loss, float* probs, const float* logits, const int32_t* targets,
                           int64_t n, int64_t v) {
  if (n <= 0) {
    loss[0] = 0.0f;
    return;
  }
  Tensor row_loss = Tensor::empty({n}, DType::f64);
  double* rl = row_loss.data<double>();
  parallel_for(n, n * v * 3, [&](int64_t i) {
    const float* x = logits + i * v;
    float* pr = probs + i * v;
    const float mx = row_max(x, v);
    const float sum = row_exp_sum(pr, x, mx, v);
    row_scale(pr, 1.0f / sum, v);
    const double lse = double(mx) + std::log(double(sum));
    rl[i] = lse - double(x[targets[i]]);
  });
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += rl[i];
  loss[0] = static_cast<float>(total / double(n));
}

// dlogits[i,j] = dloss/N * (probs[i,j] - [j == target_i])
void cross_entropy_backward(float* dlogits, float dloss, const float* probs, const int32_t* targets,
                            int64_t n, int64_t v) {
  if (n <= 0) return;
  const float s = static_cast<float>(double(dloss) / double(n));
  const VF vs = set1(s);
  parallel_for(n, n * v, [&](int64_t i) {
    float* out = dlogits + i * v;
    const float* pr = probs + i * v;
    row_for(v, [&](int64_t j, int64_t w) { store_n(out + j, vs * load_n(pr + j, w), w); });
    out[targets[i]] = s * (pr[targets[i]] - 1.0f);
  });
}

}  // namespace normlab::cpu
