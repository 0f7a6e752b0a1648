// Matrix products on oneDNN 2.6's matmul primitive: C = scale * op(A) @ op(B) [+ bias] [+ C].
// Transposes are strides in the memory descriptors (oneDNN's brgemm/gemm kernels read them
// directly: no copies), shared weights are a batch dim of size 1 (broadcast; a batch stride of
// 0 makes 2.6 fall back to its reference kernel), `accumulate` is a sum post-op and the linear
// layer's bias is fused as the primitive's bias argument.
#include <fmt/format.h>

#include <cstring>

#include "kernels.h"
#include "onednn.h"
#include "normlab/error.h"

namespace normlab::cpu {

namespace {

constexpr int64_t kKindMatmul = 1;

std::string view_str(const MatView& v) {
  std::string dims, strides;
  for (int i = 0; i < v.nd; ++i) {
    dims += fmt::format("{}{}", i ? "x" : "", v.dims[i]);
    strides += fmt::format("{}{}", i ? "," : "", v.strides[i]);
  }
  return fmt::format("{} (strides {})", dims, strides);
}

void add_view(PrimitiveKey& key, const MatView& v) {
  key.add(v.nd).add_range(v.dims, v.dims + v.nd).add_range(v.strides, v.strides + v.nd);
}

dnnl::memory::desc view_md(const MatView& v) {
  return dnnl::memory::desc(md_dims(v.dims, v.nd), dnnl::memory::data_type::f32,
                            md_dims(v.strides, v.nd));
}

// (rows x cols) stored row-major, or its transpose when `trans` (stored cols x rows).
MatView view2(int64_t rows, int64_t cols, bool trans) {
  MatView v;
  v.nd = 2;
  v.dims[0] = rows;
  v.dims[1] = cols;
  v.strides[0] = trans ? 1 : cols;
  v.strides[1] = trans ? rows : 1;
  return v;
}

// A batch of `batch` such matrices, consecutive in memory; batch 1 broadcasts.
MatView view3(int64_t batch, int64_t rows, int64_t cols, bool trans) {
  MatView m = view2(rows, cols, trans), v;
  v.nd = 3;
  v.dims[0] = batch;
  v.strides[0] = rows * cols;
  for (int i = 0; i < 2; ++i) {
    v.dims[i + 1] = m.dims[i];
    v.strides[i + 1] = m.strides[i];
  }
  return v;
}

}  // namespace

void matmul_strided(float* c, const float* a, const float* b, const float* bias, const MatView& av,
                    const MatView& bv, const MatView& cv, float scale, bool accumulate,
                    Epilogue epilogue) {
  NL_CHECK(av.nd == bv.nd && bv.nd == cv.nd && av.nd >= 2 && av.nd <= 4,
           "matmul: views of {}, {} and {} dims", av.nd, bv.nd, cv.nd);
  const bool binary = epilogue.op != Epilogue::Op::none;
  NL_CHECK(!binary || epilogue.src1 != nullptr, "matmul: an epilogue without its second operand");
  PrimitiveKey key(kKindMatmul);
  add_view(key, av);
  add_view(key, bv);
  add_view(key, cv);
  key.add(bias != nullptr).add(accumulate).add_float(scale).add(static_cast<int64_t>(epilogue.op));

  const int nd = cv.nd;
  auto describe = [&] {
    return fmt::format("matmul src {} @ weights {} -> dst {}{}{}{}{}", view_str(av), view_str(bv),
                       view_str(cv), bias ? " + bias" : "", accumulate ? " (sum post-op)" : "",
                       scale != 1.0f ? fmt::format(" scale {}", scale) : "",
                       epilogue.op == Epilogue::Op::add   ? " (binary add post-op)"
                       : epilogue.op == Epilogue::Op::mul ? " (binary mul post-op)"
                                                          : "");
  };
  // The epilogue's operand has dst's dims, stored contiguously.
  MatView ev = cv;
  for (int i = nd - 1, stride = 1; i >= 0; --i) {
    ev.strides[i] = stride;
    stride *= static_cast<int>(cv.dims[i]);
  }
  auto make = [&](const dnnl::engine& eng) {
    using dnnl::memory;
    memory::desc a_md = view_md(av), b_md = view_md(bv), c_md = view_md(cv), e_md = view_md(ev);
    dnnl::primitive_attr attr;
    if (accumulate || binary) {
      dnnl::post_ops po;
      if (accumulate) po.append_sum(1.0f);
      if (binary)
        po.append_binary(epilogue.op == Epilogue::Op::add ? dnnl::algorithm::binary_add
                                                          : dnnl::algorithm::binary_mul,
                         e_md);
      attr.set_post_ops(po);
    }
    if (scale != 1.0f) attr.set_output_scales(0, {scale});
    PrimitiveSpec spec;
    dnnl::matmul::primitive_desc pd;
    if (bias) {
      // {1, ..., 1, N}: one value per output column, broadcast over rows and batches.
      memory::dims bd(static_cast<size_t>(nd), 1), bs(static_cast<size_t>(nd), cv.dims[nd - 1]);
      bd[static_cast<size_t>(nd - 1)] = cv.dims[nd - 1];
      bs[static_cast<size_t>(nd - 1)] = 1;
      memory::desc bias_md(bd, memory::data_type::f32, bs);
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, eng);
      spec.args = {{DNNL_ARG_SRC, a_md},
                   {DNNL_ARG_WEIGHTS, b_md},
                   {DNNL_ARG_BIAS, bias_md},
                   {DNNL_ARG_DST, c_md}};
    } else {
      pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, eng);
      spec.args = {{DNNL_ARG_SRC, a_md}, {DNNL_ARG_WEIGHTS, b_md}, {DNNL_ARG_DST, c_md}};
    }
    const int post_op_index = accumulate ? 1 : 0;
    if (binary) spec.args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op_index) | DNNL_ARG_SRC_1, e_md});
    spec.primitive = dnnl::matmul(pd);
    spec.impl = pd.impl_info_str();
    return spec;
  };
  if (bias && binary)
    run_primitive(key, make, describe, {a, b, bias, c, epilogue.src1});
  else if (bias)
    run_primitive(key, make, describe, {a, b, bias, c});
  else if (binary)
    run_primitive(key, make, describe, {a, b, c, epilogue.src1});
  else
    run_primitive(key, make, describe, {a, b, c});
}

void matmul(float* c, const float* a, const float* b, const MatmulSpec& s) {
  int64_t batch = s.batch, m = s.m;
  const int64_t n = s.n, k = s.k;
  const bool trans_a = s.trans_a, trans_b = s.trans_b, a_batched = s.a_batched, b_batched = s.b_batched;
  const bool accumulate = s.accumulate;
  if (batch <= 0 || m <= 0 || n <= 0) return;
  if (k <= 0) {  // an empty sum: the product is zero
    if (!accumulate) fill(c, 0.0f, batch * m * n);
    return;
  }
  if (batch > 1 && !a_batched && !b_batched) {
    // Every C_b is the same product: one primitive, run per batch (rare; oneDNN wants the dst
    // batch to come from src or weights).
    for (int64_t bi = 0; bi < batch; ++bi)
      matmul(c + bi * m * n, a, b, MatmulSpec{1, m, n, k, trans_a, trans_b, false, false, accumulate});
    return;
  }
  if (batch > 1 && a_batched && !b_batched && !trans_a) {
    // Shared weights and row-major A_b: the A_b stacked are one (batch*M x K) matrix, and the
    // C_b stacked one (batch*M x N): a single larger GEMM.
    m *= batch;
    batch = 1;
  }
  if (batch == 1) {
    matmul_strided(c, a, b, nullptr, view2(m, k, trans_a), view2(k, n, trans_b), view2(m, n, false),
                   1.0f, accumulate);
    return;
  }
  matmul_strided(c, a, b, nullptr, view3(a_batched ? batch : 1, m, k, trans_a),
                 view3(b_batched ? batch : 1, k, n, trans_b), view3(batch, m, n, false), 1.0f,
                 accumulate);
}

void linear_forward(float* y, const float* x, const float* w, const float* bias, const float* residual,
                    int64_t m, int64_t k, int64_t n) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // y = bias broadcast (or zero) [+ residual]
    for (int64_t i = 0; i < m; ++i) {
      if (bias)
        std::memcpy(y + i * n, bias, static_cast<size_t>(n) * sizeof(float));
      else
        fill(y + i * n, 0.0f, n);
    }
    if (residual) accumulate(y, residual, m * n);
    return;
  }
  // w is (N x K) row-major, i.e. w^T (K x N) with strides (1, K).
  Epilogue epi;
  if (residual) epi = {Epilogue::Op::add, residual};
  matmul_strided(y, x, w, bias, view2(m, k, false), view2(k, n, true), view2(m, n, false), 1.0f,
                 false, epi);
}

void linear_backward_input(float* dx, const float* dy, const float* w, const float* gate, int64_t m,
                           int64_t k, int64_t n) {
  if (m <= 0 || k <= 0) return;
  if (n <= 0) {  // an empty sum
    fill(dx, 0.0f, m * k);
    return;
  }
  Epilogue epi;
  if (gate) epi = {Epilogue::Op::mul, gate};
  // dy (M x N) @ w (N x K), both row-major.
  matmul_strided(dx, dy, w, nullptr, view2(m, n, false), view2(n, k, false), view2(m, k, false), 1.0f,
                 false, epi);
}

}  // namespace normlab::cpu
