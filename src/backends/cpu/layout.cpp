// Column sums (the bias gradient), the axis swap, and the embedding gather / scatter-add of the
// cpu backend. All split work so that each output element is produced by one thread in a fixed
// order: no atomics, same bits for any thread count.
#include <algorithm>
#include <cstring>

#include "kernels.h"
#include "parallel.h"
#include "simd.h"

namespace normlab::cpu {

using namespace simd;

// out[j] = sum_i x[i,j]
// for i: for j: out[j] += x[i*cols + j]
// Threads own column ranges; each range is walked 4 vectors wide so that four independent
// accumulation chains hide the add latency, and the rows are summed in order.
void sum_rows(float* out, const float* x, int64_t rows, int64_t cols) {
  parallel_chunks(
      cols, rows * cols,
      [&](int64_t lo, int64_t hi) {
        int64_t j = lo;
        for (; j + 4 * kWidth <= hi; j += 4 * kWidth) {
          VF a0 = zero(), a1 = zero(), a2 = zero(), a3 = zero();
          for (int64_t i = 0; i < rows; ++i) {
            const float* r = x + i * cols + j;
            a0 = a0 + load(r);
            a1 = a1 + load(r + kWidth);
            a2 = a2 + load(r + 2 * kWidth);
            a3 = a3 + load(r + 3 * kWidth);
          }
          store(out + j, a0);
          store(out + j + kWidth, a1);
          store(out + j + 2 * kWidth, a2);
          store(out + j + 3 * kWidth, a3);
        }
        for (; j < hi; j += kWidth) {
          const int64_t w = std::min(kWidth, hi - j);
          VF a = zero();
          for (int64_t i = 0; i < rows; ++i) a = a + load_n(x + i * cols + j, w);
          store_n(out + j, a, w);
        }
      },
      4 * kWidth);
}

// out[o,bd,m,a,i] = x[o,a,m,bd,i]
// Work units are (o, m, a-tile); within one, (a, bd) tiles of 32 x 32 keep both the reads and
// the writes within a few cache lines per row when `inner` is small (a plain 2-D transpose).
void transpose(float* out, const float* x, int64_t outer, int64_t a, int64_t mid, int64_t bdim,
               int64_t inner) {
  constexpr int64_t kTile = 32;
  const int64_t atiles = (a + kTile - 1) / kTile;
  const int64_t total = outer * a * mid * bdim * inner;
  const size_t row_bytes = static_cast<size_t>(inner) * sizeof(float);
  parallel_for(outer * mid * atiles, total, [&](int64_t u) {
    const int64_t o = u / (mid * atiles), m = (u / atiles) % mid, a0 = (u % atiles) * kTile;
    const int64_t a1 = std::min(a, a0 + kTile);
    for (int64_t b0 = 0; b0 < bdim; b0 += kTile) {
      const int64_t b1 = std::min(bdim, b0 + kTile);
      for (int64_t bi = b0; bi < b1; ++bi) {
        float* dst = out + (((o * bdim + bi) * mid + m) * a) * inner;
        for (int64_t ai = a0; ai < a1; ++ai) {
          const float* src = x + (((o * a + ai) * mid + m) * bdim + bi) * inner;
          if (inner == 1)
            dst[ai] = src[0];
          else
            std::memcpy(dst + ai * inner, src, row_bytes);
        }
      }
    }
  });
}

// y[i,:] = table[ids[i],:]        (ids already checked to lie in [0, V))
void embedding_forward(float* y, const float* table, const int32_t* ids, int64_t n, int64_t d) {
  const size_t row_bytes = static_cast<size_t>(d) * sizeof(float);
  parallel_for(n, n * d,
               [&](int64_t i) { std::memcpy(y + i * d, table + int64_t(ids[i]) * d, row_bytes); });
}

// dtable = 0; for i: dtable[ids[i],:] += dy[i,:]
// Threads own column ranges of the table, so two tokens with the same id never race and each
// row of dtable sums its tokens in order.
void embedding_backward(float* dtable, const float* dy, const int32_t* ids, int64_t n, int64_t v,
                        int64_t d) {
  fill(dtable, 0.0f, v * d);
  parallel_chunks(
      d, n * d,
      [&](int64_t lo, int64_t hi) {
        for (int64_t i = 0; i < n; ++i) {
          float* dst = dtable + int64_t(ids[i]) * d;
          const float* src = dy + i * d;
          row_for(hi - lo, [&](int64_t j, int64_t w) {
            store_n(dst + lo + j, load_n(dst + lo + j, w) + load_n(src + lo + j, w), w);
          });
        }
      },
      kWidth);
}

}  // namespace normlab::cpu
