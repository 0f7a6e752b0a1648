// `bench norms --precision bf16,fp16` on the cpu: the rows of the 16-bit storage kernels
// (x, dy, y, dx and the parameters as 2-byte encodings, float32 statistics) on their op cases
// stored in the format, timed beside the float32 rows of the same shape and thread count and held
// to the same copy loop (GB/s counts 2 bytes per stored element).
#include "bench_internal.h"
#include "normlab/bench_kernels.h"
#include "normlab/cpu_kernels.h"
#include "normlab/error.h"

namespace normlab::bench::detail {

namespace {

using opcases::OpCase;
using opcases::Tensors;

const uint16_t* in16(Tensors& t, const char* name) { return static_cast<const uint16_t*>(t.at(name).raw()); }
uint16_t* out16(Tensors& t, const char* name) {
  Tensor* o = t.out(name);
  return o ? static_cast<uint16_t*>(o->raw()) : nullptr;
}
const float* in(Tensors& t, const char* name) { return t.at(name).data<float>(); }
float* out(Tensors& t, const char* name) {
  Tensor* o = t.out(name);
  return o ? o->data<float>() : nullptr;
}

}  // namespace

Precision storage_of(const std::string& dtype) {
  if (dtype == "bf16") return Precision::bf16;
  if (dtype == "fp16") return Precision::fp16;
  NL_CHECK(dtype == "f32", "unknown storage dtype '{}'", dtype);
  return Precision::fp32;
}

NormImpl norm16_impl(NormKind norm, Precision p) {
  NL_CHECK(norm == NormKind::layernorm || norm == NormKind::rmsnorm, "16-bit norm rows: LayerNorm or RMSNorm, not {}",
           to_string(norm));
  NormImpl m;
  m.norm = norm;
  m.impl = "fused";
  m.provider = "normlab";
  m.dtype = to_string(p);
  const bool ln = norm == NormKind::layernorm;
  m.forward = [p, ln](Tensors& t, const OpCase& c) {
    const int64_t n = t.at("x").shape()[0], d = t.at("x").shape()[1];
    const float eps = static_cast<float>(c.number("eps"));
    if (ln)
      cpu::layernorm_forward_16(p, out16(t, "y"), out(t, "mean"), out(t, "rstd"), in16(t, "x"), in16(t, "gamma"),
                                in16(t, "beta"), n, d, eps);
    else
      cpu::rmsnorm_forward_16(p, out16(t, "y"), out(t, "rstd"), in16(t, "x"), in16(t, "gamma"), n, d, eps);
  };
  m.backward = [p, ln](Tensors& t, const OpCase&) {
    const int64_t n = t.at("x").shape()[0], d = t.at("x").shape()[1];
    if (ln)
      cpu::layernorm_backward_16(p, out16(t, "dx"), out(t, "dgamma"), out(t, "dbeta"), in16(t, "dy"), in16(t, "x"),
                                 in16(t, "gamma"), in(t, "mean"), in(t, "rstd"), n, d);
    else
      cpu::rmsnorm_backward_16(p, out16(t, "dx"), out(t, "dgamma"), in16(t, "dy"), in16(t, "x"), in16(t, "gamma"),
                               in(t, "rstd"), n, d);
  };
  return m;
}

}  // namespace normlab::bench::detail
