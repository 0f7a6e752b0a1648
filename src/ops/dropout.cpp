// Dropout (ops.h): the scope that turns it on for a step's forward, and the op.
#include "normlab/dropout_kernels.h"
#include "normlab/rng.h"
#include "op_common.h"

namespace normlab {
using namespace ops_detail;

namespace {
thread_local double t_rate = 0.0;
thread_local uint64_t t_key = 0;
thread_local uint64_t t_calls = 0;  // the masks drawn in the innermost scope so far
}  // namespace

DropoutScope::DropoutScope(double rate, uint64_t key) : previous_rate_(t_rate), previous_key_(t_key), previous_calls_(t_calls) {
  DropoutMask::of(rate, key);  // refuses a rate outside [0, 1)
  t_rate = rate;
  t_key = key;
  t_calls = 0;
}

DropoutScope::~DropoutScope() {
  t_rate = previous_rate_;
  t_key = previous_key_;
  t_calls = previous_calls_;
}

bool dropout_active() { return t_rate > 0.0; }

uint64_t dropout_step_key(uint64_t seed, int64_t step) {
  Rng rng(seed, stream::dropout);
  return mix64(rng.next_u64() + static_cast<uint64_t>(step));
}

namespace ops_detail {
DropoutMask next_dropout_mask() {
  if (t_rate <= 0.0) return DropoutMask{};
  return DropoutMask::of(t_rate, mix64(t_key ^ mix64(++t_calls)));
}
}  // namespace ops_detail

Tensor dropout(const Tensor& x_in) {
  check_float_same("dropout", {{"x", &x_in}});
  const DropoutMask mask = next_dropout_mask();
  if (!mask.on()) return x_in;
  const Tensor x = stored(x_in);
  const Precision p = widest({&x});
  Tensor y = new_output(x.shape(), p, x);
  run_kernel(backend_of(x), DropoutApply{y, x, mask});
  store(y, p, "dropout");
  if (needs_grad({&x})) {
    record("dropout", y, {x}, [mask](const Tensor& dy, GradOutputs& g) {
      if (g[0]) run_kernel(backend_of(dy), DropoutApply{*g[0], dy, mask});
    });
  }
  return y;
}

}  // namespace normlab
