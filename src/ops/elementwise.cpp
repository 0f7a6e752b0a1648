// Elementwise ops: add, alpha*a + b, scale, mul, GELU.
#include "normlab/elementwise_kernels.h"
#include "op_common.h"

namespace normlab {
using namespace ops_detail;

namespace ops_detail {
// d(alpha*a + b): da = alpha*dy, db = dy. Shared with the fused add+norm ops.
BackwardFn add_scaled_backward(double alpha) {
  return [alpha](const Tensor& dy, GradOutputs& g) {
    if (g[0]) {
      if (alpha == 1.0) g.pass_through(0); else run_kernel(backend_of(dy), Scale{*g[0], dy, alpha});
    }
    g.pass_through(1);
  };
}
}  // namespace ops_detail

static void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  check_float_same(op, {{"a", &a}, {"b", &b}});
  NL_CHECK(a.shape() == b.shape(), "{}: shapes {} and {} differ (no broadcasting)", op, shape_str(a.shape()),
           shape_str(b.shape()));
}

Tensor add_scaled(const Tensor& a_in, double alpha, const Tensor& b_in) {
  check_same_shape("add", a_in, b_in);
  const Tensor a = stored(a_in), b = stored(b_in);
  const Precision p = widest({&a, &b});
  Tensor y = new_output(a.shape(), p, a);
  run_kernel(backend_of(a), Add{y, a, b, alpha, 1.0});
  store(y, p, "add");
  if (needs_grad({&a, &b})) record("add", y, {a, b}, add_scaled_backward(alpha));
  return y;
}

Tensor add(const Tensor& a, const Tensor& b) { return add_scaled(a, 1.0, b); }

double sum_squares(const Tensor& x) {
  check_float_same("sum_squares", {{"x", &x}});
  return sum_squares(backend_of(x), x);
}

void install_gradient_math() {
  GradientMath math;
  math.accumulate = [](Tensor& dst, const Tensor& g) { run_kernel(backend_of(dst), Accumulate{dst, g}); };
  math.add = [](Tensor& out, const Tensor& a, const Tensor& b) {
    run_kernel(backend_of(out), Add{out, a, b, 1.0, 1.0});
  };
  math.convert = [](Tensor& dst, const Tensor& src) { run_kernel(backend_of(dst), Copy{dst, src}); };
  math.store = store_gradient;
  set_gradient_math(math);
}

Tensor scale(const Tensor& x_in, double alpha) {
  check_float_same("scale", {{"x", &x_in}});
  const Tensor x = stored(x_in);
  const Precision p = widest({&x});
  Tensor y = new_output(x.shape(), p, x);
  run_kernel(backend_of(x), Scale{y, x, alpha});
  store(y, p, "scale");
  if (needs_grad({&x})) {
    record("scale", y, {x}, [alpha](const Tensor& dy, GradOutputs& g) {
      if (g[0]) run_kernel(backend_of(dy), Scale{*g[0], dy, alpha});
    });
  }
  return y;
}

Tensor mul(const Tensor& a_in, const Tensor& b_in) {
  check_same_shape("mul", a_in, b_in);
  const Tensor a = stored(a_in), b = stored(b_in);
  const Precision p = widest({&a, &b});
  Tensor y = new_output(a.shape(), p, a);
  run_kernel(backend_of(a), Mul{y, a, b});
  store(y, p, "mul");
  if (needs_grad({&a, &b})) {
    record("mul", y, {a, b}, [a, b](const Tensor& dy, GradOutputs& g) {
      Backend& kb = backend_of(dy);
      if (g[0]) run_kernel(kb, Mul{*g[0], dy, b});
      if (g[1]) run_kernel(kb, Mul{*g[1], dy, a});
    });
  }
  return y;
}

Tensor gelu(const Tensor& x_in) {
  check_float_same("gelu", {{"x", &x_in}});
  const Tensor x = stored(x_in);
  const Precision p = widest({&x});
  Tensor y = new_output(x.shape(), p, x);
  if (!needs_grad({&x})) {
    run_kernel(backend_of(x), GeluForward{y, nullptr, x});
    store(y, p, "gelu");
    return y;
  }
  // gelu'(x) stays float32: the backward's float32 arithmetic, from the stored x.
  Tensor dydx = float_output(x.shape(), x);
  run_kernel(backend_of(x), GeluForward{y, &dydx, x});
  store(y, p, "gelu");
  record("gelu", y, {x}, [dydx](const Tensor& dy, GradOutputs& g) {
    if (g[0]) run_kernel(backend_of(dy), Mul{*g[0], dy, dydx});
  });
  return y;
}

}  // namespace normlab
