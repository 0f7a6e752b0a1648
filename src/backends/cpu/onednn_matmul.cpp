// Matrix products on oneDNN 2.6's matmul primitive: C = scale * op(A) @ op(B) [+ bias] [+ C].
// Transposes are strides in the memory descriptors (oneDNN's brgemm/gemm kernels read them
// directly: no copies), shared weights are a batch dim of size 1 (broadcast; a batch stride of
// 0 makes 2.6 fall back to its reference kernel), `accumulate` is a sum post-op and the linear
// layer's bias is fused as the primitive's bias argument. Operands whose values are all bf16
// (a bf16 run's products) are multiplied as bf16 with float32 accumulation where the CPU has
// bf16 dot products: each product of two bf16 values is exact in float32, so only the order of
// the float32 sums differs from the float32 primitive, and subnormals: AVX512-BF16's and AMX's dot
// products read a subnormal operand as zero and flush a subnormal result to zero.
#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "kernels.h"
#include "normlab/cpu_backend.h"
#include "normlab/error.h"
#include "normlab/kernel_clock.h"
#include "onednn.h"
#include "parallel.h"

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

dnnl::memory::desc view_md(const MatView& v, dnnl::memory::data_type type = dnnl::memory::data_type::f32) {
  return dnnl::memory::desc(md_dims(v.dims, v.nd), type, md_dims(v.strides, v.nd));
}

// The elements a view spans from its first: its largest offset, plus one.
int64_t view_span(const MatView& v) {
  int64_t span = 1;
  for (int i = 0; i < v.nd; ++i) span += (v.dims[i] - 1) * v.strides[i];
  return span;
}

// x's n values as bf16 in dst, when every one is on bf16's grid (its low 16 bits zero, so that
// the conversion is exact); false otherwise, with dst partly written.
bool to_bf16_exactly(uint16_t* dst, const float* x, int64_t n) {
  std::atomic<uint32_t> off_grid{0};
  parallel_chunks(n, n, [dst, x, &off_grid](int64_t lo, int64_t hi) {
    // Local pointers: a store may alias a captured one, which then reloads every time and keeps
    // the loop from vectorizing.
    uint16_t* const out = dst;
    const float* const in = x;
    uint32_t low = 0;
    for (int64_t i = lo; i < hi; ++i) {
      uint32_t u;
      std::memcpy(&u, in + i, sizeof u);
      out[i] = static_cast<uint16_t>(u >> 16);
      low |= u & 0xFFFFu;
    }
    off_grid.fetch_or(low, std::memory_order_relaxed);
  });
  return off_grid.load() == 0;
}

// A and B of one product as bf16, in buffers of this thread's, kept for the next product.
struct Bf16Operands {
  std::vector<uint16_t> a, b;
  // Converts both views' spans; false (nothing to use) when a value is off bf16's grid.
  bool convert(const float* a_src, const MatView& av, const float* b_src, const MatView& bv) {
    a.resize(static_cast<size_t>(view_span(av)));
    b.resize(static_cast<size_t>(view_span(bv)));
    return to_bf16_exactly(a.data(), a_src, view_span(av)) && to_bf16_exactly(b.data(), b_src, view_span(bv));
  }
};

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

// The primitive's output scale and post-ops: the sum (accumulate), then the binary epilogue.
dnnl::primitive_attr epilogue_attr(float scale, bool accumulate, const Epilogue& epilogue,
                                   const dnnl::memory::desc& e_md) {
  dnnl::primitive_attr attr;
  if (accumulate || epilogue.op != Epilogue::Op::none) {
    dnnl::post_ops po;
    if (accumulate) po.append_sum(1.0f);
    if (epilogue.op != Epilogue::Op::none)
      po.append_binary(epilogue.op == Epilogue::Op::add ? dnnl::algorithm::binary_add : dnnl::algorithm::binary_mul,
                       e_md);
    attr.set_post_ops(po);
  }
  if (scale != 1.0f) attr.set_output_scales(0, {scale});
  return attr;
}

}  // namespace

void matmul_strided(float* c, const float* a_f32, const float* b_f32, const float* bias, const MatView& av,
                    const MatView& bv, const MatView& cv, float scale, bool accumulate, Epilogue epilogue,
                    bool bf16_operands) {
  NL_CHECK(av.nd == bv.nd && bv.nd == cv.nd && av.nd >= 2 && av.nd <= 4,
           "matmul: views of {}, {} and {} dims", av.nd, bv.nd, cv.nd);
  const bool binary = epilogue.op != Epilogue::Op::none;
  NL_CHECK(!binary || epilogue.src1 != nullptr, "matmul: an epilogue without its second operand");
  thread_local Bf16Operands converted;
  const bool bf16 = bf16_operands && native_bf16_products() && converted.convert(a_f32, av, b_f32, bv);
  const void* a = bf16 ? static_cast<const void*>(converted.a.data()) : a_f32;
  const void* b = bf16 ? static_cast<const void*>(converted.b.data()) : b_f32;
  const auto operand_type = bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  PrimitiveKey key(kKindMatmul);
  add_view(key, av);
  add_view(key, bv);
  add_view(key, cv);
  key.add(bias != nullptr).add(accumulate).add_float(scale).add(static_cast<int64_t>(epilogue.op)).add(bf16);

  const int nd = cv.nd;
  auto describe = [&] {
    return fmt::format("matmul{} src {} @ weights {} -> dst {}{}{}{}{}", bf16 ? " (bf16 operands)" : "",
                       view_str(av), view_str(bv),
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
    memory::desc a_md = view_md(av, operand_type), b_md = view_md(bv, operand_type), c_md = view_md(cv),
                 e_md = view_md(ev);
    const dnnl::primitive_attr attr = epilogue_attr(scale, accumulate, epilogue, e_md);
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
  // The product alone, apart from the kernel around it (the bf16 operands' conversion above, a
  // bias or layout step of the caller).
  const KernelClock::Region timed("onednn_matmul");
  if (bias && binary)
    run_primitive(key, make, describe, {a, b, bias, c, epilogue.src1});
  else if (bias)
    run_primitive(key, make, describe, {a, b, bias, c});
  else if (binary)
    run_primitive(key, make, describe, {a, b, c, epilogue.src1});
  else
    run_primitive(key, make, describe, {a, b, c});
}

void matmul(float* c, const float* a, const float* b, const MatmulSpec& s, bool bf16_operands) {
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
      matmul(c + bi * m * n, a, b, MatmulSpec{1, m, n, k, trans_a, trans_b, false, false, accumulate}, bf16_operands);
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
                   1.0f, accumulate, {}, bf16_operands);
    return;
  }
  matmul_strided(c, a, b, nullptr, view3(a_batched ? batch : 1, m, k, trans_a),
                 view3(b_batched ? batch : 1, k, n, trans_b), view3(batch, m, n, false), 1.0f,
                 accumulate, {}, bf16_operands);
}

void linear_forward(float* y, const float* x, const float* w, const float* bias, const float* residual,
                    int64_t m, int64_t k, int64_t n, bool bf16_operands) {
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
                 false, epi, bf16_operands);
}

void linear_backward_input(float* dx, const float* dy, const float* w, const float* gate, int64_t m,
                           int64_t k, int64_t n, bool bf16_operands) {
  if (m <= 0 || k <= 0) return;
  if (n <= 0) {  // an empty sum
    fill(dx, 0.0f, m * k);
    return;
  }
  Epilogue epi;
  if (gate) epi = {Epilogue::Op::mul, gate};
  // dy (M x N) @ w (N x K), both row-major.
  matmul_strided(dx, dy, w, nullptr, view2(m, n, false), view2(n, k, false), view2(m, k, false), 1.0f,
                 false, epi, bf16_operands);
}

}  // namespace normlab::cpu
