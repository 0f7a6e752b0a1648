// Embedding lookup, cross-entropy loss, reshape and transpose.
#include "normlab/cross_entropy_kernels.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/embedding_kernels.h"
#include "normlab/layout_kernels.h"
#include "op_common.h"

namespace normlab {
using namespace ops_detail;

Tensor embedding(const Tensor& ids, const Tensor& table_in) {
  const Tensor table = stored(table_in);
  NL_CHECK(ids.dtype() == DType::i32, "embedding: ids must be int32, got {}", to_string(ids.dtype()));
  check_float_same("embedding", {{"table", &table}});
  NL_CHECK(table.dim() == 2, "embedding: table must be (V, D), got {}", shape_str(table.shape()));
  NL_CHECK(ids.device() == table.device(), "embedding: ids on {} but table on {}", device_name(ids.device()),
           device_name(table.device()));
  const int64_t n = ids.numel(), v = table.size(0), d = table.size(1);
  Shape out_shape = ids.shape();
  out_shape.push_back(d);
  Tensor y = new_output(out_shape, product_format(), table);
  run_kernel(backend_of(table), EmbeddingForward{y, table, ids, n, v, d});
  store(y, product_format(), "embedding");
  if (needs_grad({&table})) {
    record("embedding", y, {table}, [ids, n, v, d](const Tensor& dy, GradOutputs& g) {
      if (g[0]) run_kernel(backend_of(dy), EmbeddingBackward{*g[0], dy, ids, n, v, d});
    });
  }
  return y;
}

Tensor cross_entropy(const Tensor& logits_in, const Tensor& targets) {
  check_float_same("cross_entropy", {{"logits", &logits_in}});
  const Tensor logits = stored(logits_in);
  NL_CHECK(targets.dtype() == DType::i32, "cross_entropy: targets must be int32, got {}", to_string(targets.dtype()));
  NL_CHECK(logits.dim() >= 1, "cross_entropy: logits must be (..., V)");
  NL_CHECK(Shape(logits.shape().begin(), logits.shape().end() - 1) == targets.shape(),
           "cross_entropy: logits {} need targets of shape {}, got {}", shape_str(logits.shape()),
           shape_str(Shape(logits.shape().begin(), logits.shape().end() - 1)), shape_str(targets.shape()));
  const int64_t n = rows_of(logits), v = logits.size(-1);
  NL_CHECK(n >= 1, "cross_entropy: no rows in logits {}", shape_str(logits.shape()));
  Tensor loss = float_output({}, logits);
  Tensor probs = float_output({n, v}, logits);
  run_kernel(backend_of(logits), CrossEntropyForward{loss, probs, logits, targets, n, v});
  store(loss, Precision::fp32, "cross_entropy");  // float32 in any precision (shown to a watch)
  if (needs_grad({&logits})) {
    record("cross_entropy", loss, {logits}, [probs, targets, n, v](const Tensor& dloss, GradOutputs& g) {
      if (g[0]) run_kernel(backend_of(dloss), CrossEntropyBackward{*g[0], dloss, probs, targets, n, v});
    });
  }
  return loss;
}

Tensor reshape(const Tensor& x_in, const Shape& shape) {
  const Tensor x = stored(x_in);  // a view of a leaf would see its float32 values
  Shape target = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      NL_CHECK(infer < 0, "reshape: more than one -1 in {}", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      NL_CHECK(target[i] >= 0, "reshape: negative size in {}", shape_str(shape));
      known *= target[i];
    }
  }
  if (infer >= 0) {
    NL_CHECK(known > 0 && x.numel() % known == 0, "reshape: cannot view {} as {}", shape_str(x.shape()),
             shape_str(shape));
    target[static_cast<size_t>(infer)] = x.numel() / known;
  }
  NL_CHECK(shape_numel(target) == x.numel(), "reshape: cannot view {} ({} elements) as {}", shape_str(x.shape()),
           x.numel(), shape_str(shape));
  Tensor y = x.view(target);
  if (needs_grad({&x})) {
    record("reshape", y, {x}, [in_shape = x.shape()](const Tensor& dy, GradOutputs& g) {
      if (g[0]) run_kernel(backend_of(dy), Copy{*g[0], dy.view(in_shape)});
    });
  }
  return y;
}

Tensor transpose(const Tensor& x_in, int64_t dim0, int64_t dim1) {
  const Tensor x = stored(x_in);
  const int64_t nd = x.dim();
  if (dim0 < 0) dim0 += nd;
  if (dim1 < 0) dim1 += nd;
  NL_CHECK(dim0 >= 0 && dim0 < nd && dim1 >= 0 && dim1 < nd, "transpose: dimensions out of range for {}",
           shape_str(x.shape()));
  if (dim0 > dim1) std::swap(dim0, dim1);
  const Shape& s = x.shape();
  int64_t outer = 1, mid = 1, inner = 1;
  for (int64_t i = 0; i < dim0; ++i) outer *= s[i];
  for (int64_t i = dim0 + 1; i < dim1; ++i) mid *= s[i];
  for (int64_t i = dim1 + 1; i < nd; ++i) inner *= s[i];
  const int64_t a = s[dim0], b = s[dim1];
  Shape out_shape = s;
  std::swap(out_shape[dim0], out_shape[dim1]);
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  if (dim0 == dim1) {
    run_kernel(backend_of(x), Copy{y, x});
  } else {
    run_kernel(backend_of(x), Transpose{y, x, outer, a, mid, b, inner});
  }
  y.impl().format = x.impl().format;  // the same values, moved
  y.impl().op_output = true;
  if (needs_grad({&x})) {
    record("transpose", y, {x}, [outer, a, mid, b, inner, same = dim0 == dim1](const Tensor& dy, GradOutputs& g) {
      if (!g[0]) return;
      if (same)
        run_kernel(backend_of(dy), Copy{*g[0], dy});
      else
        run_kernel(backend_of(dy), Transpose{*g[0], dy, outer, b, mid, a, inner});
    });
  }
  return y;
}

}  // namespace normlab
