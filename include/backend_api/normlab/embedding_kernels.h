// The embedding's kernels (kernel.h): ids (N) int32 in [0, V), table (V x D), y (N x D). The ids'
// range is each backend's check.
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

struct EmbeddingForward {
  static constexpr const char* kName = "embedding_forward";
  Tensor& y;
  const Tensor& table;
  const Tensor& ids;
  int64_t n;
  int64_t v;
  int64_t d;

  void check(const Contract& c) const {
    c.need(y, "y", n * d).need(table, "table", v * d).need(ids, "ids", n);
  }
};

// dtable (V x D) = scatter-add of dy rows at ids (written: rows not hit are zero).
struct EmbeddingBackward {
  static constexpr const char* kName = "embedding_backward";
  Tensor& dtable;
  const Tensor& dy;
  const Tensor& ids;
  int64_t n;
  int64_t v;
  int64_t d;

  void check(const Contract& c) const {
    c.need(dtable, "dtable", v * d).need(dy, "dy", n * d).need(ids, "ids", n);
  }
};

}  // namespace normlab
