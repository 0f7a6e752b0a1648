// The trainer's low-precision machinery (docs/precision.md): per-block statistics of what a
// forward stores, and the search for where a diverged step first went non-finite. Both look at
// the ops' stored values through a StoreWatch (ops.h) and count them with the backend's
// format_census kernel; neither runs on an ordinary training step.
#pragma once
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "normlab/nn.h"
#include "normlab/ops.h"
#include "normlab/train.h"

namespace normlab {

// Collects, while alive, the per-block statistics of EvalRecord's low-precision fields from the
// forward that runs inside it; fill() writes them (stream_max_abs from the trace's block outputs).
class BlockStorageStats {
 public:
  explicit BlockStorageStats(size_t blocks);
  void fill(EvalRecord& r, const ForwardTrace& trace) const;

 private:
  struct PerBlock {
    FormatCensus stored;       // every output stored in the block
    double norm_input_max = NAN;  // max |x| over its norms' inputs (inf: one held inf or NaN; NaN: no norm)
  };
  std::vector<PerBlock> blocks_;
  StoreWatchScope watch_;
};

}  // namespace normlab
