// Tensor construction, views, conversion to host values, and the arena that backs Storage.
#include "normlab/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>


namespace normlab {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
  }
  return 0;
}

DType storage_dtype(Precision p) {
  switch (p) {
    case Precision::bf16: return DType::bf16;
    case Precision::fp16: return DType::f16;
    case Precision::fp32: break;
  }
  return DType::f32;
}

Precision format_of_dtype(DType t) {
  if (t == DType::bf16) return Precision::bf16;
  if (t == DType::f16) return Precision::fp16;
  return Precision::fp32;
}

template <>
const EnumNames& enum_names<DType>() {
  static const EnumNames t{"dtype",
                           {{DType::f32, "float32", {"f32", "fp32"}, "32-bit IEEE float"},
                            {DType::f64, "float64", {"f64", "fp64", "double"}, "64-bit IEEE float"},
                            {DType::i32, "int32", {"i32"}, "32-bit integer (token ids)"},
                            {DType::bf16, "bfloat16", {"bf16"}, "bfloat16 encodings (CUDA storage)"},
                            {DType::f16, "float16", {"f16", "half"}, "IEEE binary16 encodings (CUDA storage)"}}};
  return t;
}

const char* device_name(Device d) {
  switch (d) {
    case Device::cpu: return "cpu";
    case Device::cuda: return "cuda";
    case Device::cuda_sim: return "cuda-sim";
  }
  return "?";
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  if (s.size() == 1) out += ",";
  return out + ")";
}

// ---- arena ------------------------------------------------------------------
// A caching allocator: blocks are kept in free lists by (rounded) size and handed out
// again for the next request of that size. A training step asks for the same sizes in the
// same order every time, so after the first step every request is served from the cache.
namespace {

constexpr size_t kAlignment = 64;  // a cache line; also what AVX-512 loads like

// cuda-sim's memory is asked for exactly what a tensor needs: its guard bytes then start at the
// tensor's last byte, so that a kernel writing one element too far is caught.
size_t round_size(size_t bytes, Device device) {
  if (bytes == 0) bytes = 1;
  if (device == Device::cuda_sim) return bytes;
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

struct Arena {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;
  ArenaStats stats;
  DeviceMemory alloc;

  void* allocate(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.requests;
    stats.bytes_in_use += bytes;
    auto it = free_blocks.find(bytes);
    if (it != free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
    void* p = alloc.allocate ? alloc.allocate(bytes) : std::aligned_alloc(kAlignment, bytes);
    NL_CHECK(p != nullptr, "out of memory allocating {} bytes", bytes);
    ++stats.system_allocs;
    stats.bytes_reserved += bytes;
    return p;
  }

  void deallocate(void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu);
    stats.bytes_in_use -= bytes;
    free_blocks[bytes].push_back(p);
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [bytes, blocks] : free_blocks) {
      for (void* p : blocks) {
        if (alloc.deallocate) alloc.deallocate(p); else std::free(p);
        stats.bytes_reserved -= bytes;
      }
      blocks.clear();
    }
  }
};

// Leaked on purpose: Storage may be destroyed by static destructors after the arena would be.
Arena& arena(Device d) {
  static Arena* arenas[kDeviceCount] = {new Arena(), new Arena(), new Arena()};
  return *arenas[static_cast<int>(d)];
}

}  // namespace

ArenaStats arena_stats(Device device) {
  Arena& a = arena(device);
  std::lock_guard<std::mutex> lock(a.mu);
  return a.stats;
}

void arena_release_cached(Device device) { arena(device).release_cached(); }

void register_device_memory(Device device, DeviceMemory memory) { arena(device).alloc = memory; }

namespace {

template <class T>
void fill_host(void* dst, int64_t count, double value) {
  T* p = static_cast<T*>(dst);
  const T v = static_cast<T>(value);
  for (int64_t i = 0; i < count; ++i) p[i] = v;
}

}  // namespace

Tensor& Tensor::fill_(double value) {
  if (device() != Device::cpu) {
    const DeviceMemory& m = arena(device()).alloc;
    NL_CHECK(m.fill != nullptr, "no memory hooks registered for device {}", device_name(device()));
    m.fill(raw(), dtype(), numel(), value);
    return *this;
  }
  switch (dtype()) {
    case DType::f32: fill_host<float>(raw(), numel(), value); break;
    case DType::f64: fill_host<double>(raw(), numel(), value); break;
    case DType::i32: fill_host<int32_t>(raw(), numel(), value); break;
    case DType::bf16:
    case DType::f16: {
      const uint16_t bits = encode_16(dtype(), value);
      std::fill_n(static_cast<uint16_t*>(raw()), numel(), bits);
      break;
    }
  }
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  NL_CHECK(src.dtype() == dtype() && src.device() == device() && src.numel() == numel(),
           "copy_: {} {} {} into {} {} {}", device_name(src.device()), to_string(src.dtype()),
           shape_str(src.shape()), device_name(device()), to_string(dtype()), shape_str(shape()));
  if (device() != Device::cpu) {
    const DeviceMemory& m = arena(device()).alloc;
    NL_CHECK(m.copy != nullptr, "no memory hooks registered for device {}", device_name(device()));
    m.copy(raw(), src.raw(), nbytes());
  } else if (raw() != src.raw()) {
    std::memcpy(raw(), src.raw(), nbytes());
  }
  return *this;
}

Storage::Storage(size_t bytes, Device device) : bytes_(round_size(bytes, device)), device_(device) {
  data_ = arena(device).allocate(bytes_);
}

Storage::~Storage() { arena(device_).deallocate(data_, bytes_); }

// ---- Tensor -----------------------------------------------------------------

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t v : shape) NL_CHECK(v >= 0, "negative size in shape {}", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = shape;
  impl->dtype = dtype;
  impl->device = device;
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), device);
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full_on(shape, 0.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) { return full_on(shape, value, dtype, Device::cpu); }

Tensor Tensor::full_on(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::from(const std::vector<double>& values, const Shape& shape, DType dtype) {
  NL_CHECK(static_cast<int64_t>(values.size()) == shape_numel(shape),
           "{} values do not fill a tensor of shape {}", values.size(), shape_str(shape));
  Tensor t = empty(shape, dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::f32: t.data<float>()[i] = static_cast<float>(values[i]); break;
      case DType::f64: t.data<double>()[i] = values[i]; break;
      case DType::i32: t.data<int32_t>()[i] = static_cast<int32_t>(values[i]); break;
      case DType::bf16:
      case DType::f16:
        static_cast<uint16_t*>(t.raw())[i] = encode_16(dtype, values[i]);
        break;
    }
  }
  return t;
}

Tensor Tensor::from_ids(const std::vector<int32_t>& ids, const Shape& shape) {
  NL_CHECK(static_cast<int64_t>(ids.size()) == shape_numel(shape), "{} ids do not fill shape {}", ids.size(),
           shape_str(shape));
  Tensor t = empty(shape, DType::i32);
  if (!ids.empty()) std::memcpy(t.raw(), ids.data(), ids.size() * sizeof(int32_t));
  return t;
}

TensorImpl& Tensor::impl() const {
  NL_CHECK(impl_ != nullptr, "use of an undefined tensor");
  return *impl_;
}

int64_t Tensor::size(int64_t d) const {
  int64_t n = dim();
  int64_t i = d < 0 ? d + n : d;
  NL_CHECK(i >= 0 && i < n, "dimension {} out of range for shape {}", d, shape_str(shape()));
  return impl().shape[static_cast<size_t>(i)];
}

void* Tensor::raw() const {
  const TensorImpl& t = impl();
  return static_cast<char*>(t.storage->data()) + t.offset;
}

namespace {

// Element i of n values of dtype t at p, as a double; and the value v written there (16-bit
// formats: rounded to float first, then to the format, as encode_16 does).
double read_at(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::f32: return static_cast<const float*>(p)[i];
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::i32: return static_cast<const int32_t*>(p)[i];
    case DType::bf16:
    case DType::f16: return from_bits(format_of_dtype(t), static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}
void write_at(DType t, void* p, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::i32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DType::bf16:
    case DType::f16: static_cast<uint16_t*>(p)[i] = encode_16(t, v); break;
  }
}

}  // namespace

std::vector<double> Tensor::to_vector() const {
  // A device tensor's values are downloaded (PyTorch's tolist() does the same).
  if (device() != Device::cpu) return to_device(Device::cpu).to_vector();
  std::vector<double> out(static_cast<size_t>(numel()));
  const void* p = raw();
  for (size_t i = 0; i < out.size(); ++i) out[i] = read_at(dtype(), p, static_cast<int64_t>(i));
  return out;
}

double Tensor::item() const {
  NL_CHECK(numel() == 1, "item() of a tensor of shape {} (needs exactly one element)", shape_str(shape()));
  return to_vector()[0];  // from a device: its few bytes are downloaded
}

Tensor Tensor::view(const Shape& shape) const {
  NL_CHECK(shape_numel(shape) == numel(), "cannot view a tensor of shape {} as {}", shape_str(this->shape()),
           shape_str(shape));
  auto v = std::make_shared<TensorImpl>();
  v->storage = impl().storage;
  v->offset = impl().offset;
  v->shape = shape;
  v->dtype = dtype();
  v->device = device();
  v->format = impl().format;
  v->op_output = impl().op_output;
  return Tensor(std::move(v));
}

Tensor Tensor::view_at(int64_t element_offset, const Shape& shape) const {
  NL_CHECK(element_offset >= 0 && element_offset + shape_numel(shape) <= numel(),
           "view_at: {} elements at offset {} exceed a tensor of {} elements", shape_numel(shape), element_offset,
           numel());
  Tensor v = view({numel()});
  v.impl().offset += static_cast<size_t>(element_offset) * dtype_size(dtype());
  v.impl().shape = shape;
  return v;
}

Tensor Tensor::clone() const {
  Tensor out;
  if (device() == Device::cpu) {
    out = to(dtype());
  } else {
    out = empty(shape(), dtype(), device());  // a copy on the device, never through the host
    out.copy_(*this);
  }
  out.impl().format = impl().format;  // the same values, on the same grid
  out.impl().op_output = impl().op_output;
  return out;
}

Tensor Tensor::to(DType target) const {
  NL_CHECK(device() == Device::cpu, "to() is implemented for cpu tensors only");
  if (target == dtype()) {
    Tensor out = empty(shape(), target);
    if (nbytes()) std::memcpy(out.raw(), raw(), nbytes());
    return out;
  }
  // Element by element, without a std::vector between (the values of 10^8-element op cases).
  Tensor out = empty(shape(), target);
  const void* src = raw();
  void* dst = out.raw();
  const int64_t n = numel();
  if (dtype() == DType::f64 && target == DType::f32) {
    for (int64_t i = 0; i < n; ++i) static_cast<float*>(dst)[i] = static_cast<float>(static_cast<const double*>(src)[i]);
  } else if (dtype() == DType::f32 && target == DType::f64) {
    for (int64_t i = 0; i < n; ++i) static_cast<double*>(dst)[i] = static_cast<const float*>(src)[i];
  } else {
    for (int64_t i = 0; i < n; ++i) write_at(target, dst, i, read_at(dtype(), src, i));
  }
  return out;
}

Tensor& Tensor::move_to_device_(Device target) {
  if (device() == target) return *this;
  Tensor moved = to_device(target);
  TensorImpl& me = impl();
  me.storage = moved.impl().storage;
  me.offset = moved.impl().offset;
  me.device = target;
  return *this;
}

Tensor Tensor::to_device(Device target) const {
  Tensor out = empty(shape(), dtype(), target);
  out.impl().format = impl().format;  // the same values, elsewhere
  out.impl().op_output = impl().op_output;
  const size_t bytes = nbytes();
  if (bytes == 0) return out;
  if (device() == Device::cpu && target == Device::cpu) {
    std::memcpy(out.raw(), raw(), bytes);
  } else if (device() == target) {
    out.copy_(*this);
  } else if (device() == Device::cpu) {
    const DeviceMemory& m = arena(target).alloc;
    NL_CHECK(m.upload != nullptr, "no memory hooks registered for device {}", device_name(target));
    m.upload(out.raw(), raw(), bytes);
  } else {
    NL_CHECK(target == Device::cpu, "to_device: {} to {} is not supported", device_name(device()),
             device_name(target));
    const DeviceMemory& m = arena(device()).alloc;
    NL_CHECK(m.download != nullptr, "no memory hooks registered for device {}", device_name(device()));
    m.download(out.raw(), raw(), bytes);
  }
  return out;
}

Tensor Tensor::detach() const {
  Tensor v = view(shape());
  return v;
}

Tensor& Tensor::requires_grad_(bool on) {
  NL_CHECK(!on || dtype() != DType::i32, "an int32 tensor cannot require gradients");
  NL_CHECK(is_leaf() || on, "requires_grad_(false) on a non-leaf tensor: use detach()");
  impl().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const {
  const TensorImpl& t = impl();
  if (!t.grad_valid || !t.grad) return Tensor();
  return Tensor(t.grad);
}

void Tensor::zero_grad() { impl().grad_valid = false; }

Tensor& Tensor::retain_grad() {
  impl().retain_grad = true;
  return *this;
}

Tensor& Tensor::set_name(std::string n) {
  impl().name = std::move(n);
  return *this;
}

}  // namespace normlab
