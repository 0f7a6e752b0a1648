#include "normlab/elementwise_kernels.h"
#include "op_common.h"

namespace normlab::ops_detail {

void check_float_same(const char* op, std::initializer_list<std::pair<const char*, const Tensor*>> ts) {
  const Tensor* first = nullptr;
  const char* first_name = "";
  for (auto& [name, t] : ts) {
    if (!t->defined()) continue;
    NL_CHECK(t->dtype() != DType::i32, "{}: {} must be a floating tensor, got int32", op, name);
    if (!first) {
      first = t;
      first_name = name;
      continue;
    }
    // float32 beside bf16 / f16 storage is one family: a low-precision scope's native storage
    // meets float32 parameters and streams (the op casts them, see stored / operand).
    auto family = [](DType d) { return is_16bit(d) ? DType::f32 : d; };
    NL_CHECK(family(t->dtype()) == family(first->dtype()), "{}: {} is {} but {} is {} (mixing dtypes)", op, name,
             to_string(t->dtype()), first_name, to_string(first->dtype()));
    NL_CHECK(t->device() == first->device(), "{}: {} is on {} but {} is on {} (mixing devices)", op, name,
             device_name(t->device()), first_name, device_name(first->device()));
  }
}

namespace {
thread_local Precision t_storage = Precision::fp32;
thread_local Precision t_residual = Precision::fp32;
thread_local NormCompute t_norm = NormCompute::fused;
thread_local StoreWatch* t_watch = nullptr;
bool g_native = true;

void watch(const Tensor& v, Precision p, StoredKind kind, const char* op, const char* module,
           const Tensor* norm_rstd = nullptr) {
  if (t_watch) (*t_watch)(StoreEvent{v, p, kind, op, module, norm_rstd});
}

Tensor cast(const Tensor& t) {
  Tensor y = new_output(t.shape(), t_storage, t);
  run_kernel(backend_of(t), Copy{y, t});  // a conversion where y is 16-bit storage
  store(y, t_storage, "cast");
  if (needs_grad({&t})) record("cast", y, {t}, [](const Tensor&, GradOutputs& g) { g.pass_through(0); });
  return y;
}
}  // namespace

DType storage_for(Precision p, const Tensor& like) {
  const DType d = statistics_dtype(like.dtype());
  if (p == Precision::fp32 || d != DType::f32 || !g_native || t_watch != nullptr || !is_cuda_device(like.device()))
    return d;
  return storage_dtype(p);
}

Tensor new_output(const Shape& shape, Precision p, const Tensor& like) {
  return Tensor::empty(shape, storage_for(p, like), like.device());
}

Tensor float_output(const Shape& shape, const Tensor& like) {
  return Tensor::empty(shape, statistics_dtype(like.dtype()), like.device());
}

void store(Tensor& y, Precision p, const char* op, const Tensor* norm_rstd) {
  if (!y.defined()) return;
  y.impl().format = p;
  y.impl().op_output = true;
  if (is_16bit(y.dtype())) {  // native storage: the kernel's store rounded it (no watch is set)
    NL_CHECK(format_of_dtype(y.dtype()) == p, "{}: a {} output stored as {}", op, to_string(p), to_string(y.dtype()));
    return;
  }
  watch(y, p, StoredKind::output, op, current_module(), norm_rstd);
  if (p != Precision::fp32) run_kernel(backend_of(y), RoundToFormat{y, p});
}

void watch_norm_input(const Tensor& x, const char* op) {
  watch(x, x.impl().format, StoredKind::norm_input, op, current_module());
}

bool store_watch_active() { return t_watch != nullptr; }

void watch_composite_backward(const CompositeBackwardCensus& census, bool layernorm, Precision p, const Tensor& dy,
                              const char* module) {
  if (!t_watch) return;
  for (int i = 0; i < static_cast<int>(CompositeBackwardStep::count); ++i) {
    const FormatCensus& c = census.steps[i];
    if (c.count == 0) continue;
    const char* op = composite_backward_step_name(layernorm, static_cast<CompositeBackwardStep>(i));
    (*t_watch)(StoreEvent{dy, p, StoredKind::gradient, op, module, nullptr, &c});
  }
}

void store_gradient(Tensor& g, const TensorImpl& of, const Node& from) {
  if (is_16bit(g.dtype())) return;  // native storage: rounded by the kernel that wrote it
  watch(g, of.format, StoredKind::gradient, from.op(), from.module());
  if (of.format != Precision::fp32) run_kernel(backend_of(g), RoundToFormat{g, of.format});
}

Precision product_format() { return t_storage; }

bool composite_norm(const Tensor& x) { return t_norm == NormCompute::format && x.impl().format != Precision::fp32; }

Precision widest(std::initializer_list<const Tensor*> inputs) {
  if (t_storage == Precision::fp32) return Precision::fp32;
  Precision w = t_storage;
  for (const Tensor* t : inputs)
    if (t->defined() && t->impl().format == Precision::fp32) w = Precision::fp32;
  return w;
}

Tensor stored(const Tensor& t) {
  // Not is_leaf(): under NoGradGuard every op output is a leaf, and a float32 stream must stay one.
  if (t_storage == Precision::fp32 || !t.defined() || t.impl().op_output || t.dtype() == DType::i32 ||
      t.impl().format == t_storage)
    return t;
  return cast(t);
}

Tensor operand(const Tensor& t) {
  if (t_storage == Precision::fp32 || !t.defined() || t.dtype() == DType::i32 || t.impl().format == t_storage)
    return t;
  return cast(t);
}

Shape with_last(const Shape& s, int64_t last) {
  Shape out = s;
  out.back() = last;
  return out;
}

}  // namespace normlab::ops_detail

namespace normlab {

StoragePrecisionScope::StoragePrecisionScope(Precision p, std::optional<Precision> residual, NormCompute norm)
    : previous_(ops_detail::t_storage), previous_residual_(ops_detail::t_residual), previous_norm_(ops_detail::t_norm) {
  NL_CHECK(!residual || *residual == p || *residual == Precision::fp32,
           "a residual stream in {} with activations in {}: the stream is the activations' format or fp32",
           to_string(*residual), to_string(p));
  ops_detail::t_storage = p;
  ops_detail::t_residual = residual.value_or(p);
  ops_detail::t_norm = norm;
}
StoragePrecisionScope::~StoragePrecisionScope() {
  ops_detail::t_storage = previous_;
  ops_detail::t_residual = previous_residual_;
  ops_detail::t_norm = previous_norm_;
}
Precision storage_precision() { return ops_detail::t_storage; }

void set_native_low_precision(bool on) { ops_detail::g_native = on; }
bool native_low_precision() { return ops_detail::g_native; }

StoreWatchScope::StoreWatchScope(StoreWatch watch) : previous_(ops_detail::t_watch), watch_(std::move(watch)) {
  ops_detail::t_watch = &watch_;
}
StoreWatchScope::~StoreWatchScope() { ops_detail::t_watch = previous_; }

Tensor residual_stream(const Tensor& x) {
  using namespace ops_detail;
  if (t_storage == Precision::fp32 || !x.defined() || x.impl().format == t_residual) return x;
  Tensor y = new_output(x.shape(), t_residual, x);  // fp32 from the format: exact
  run_kernel(backend_of(x), Copy{y, x});
  store(y, t_residual, "residual_stream");
  if (needs_grad({&x})) record("residual_stream", y, {x}, [](const Tensor&, GradOutputs& g) { g.pass_through(0); });
  return y;
}

}  // namespace normlab
