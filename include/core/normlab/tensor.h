// Tensor: shape, dtype, device and a view of arena-backed storage, plus the autograd
// fields the tape uses (requires_grad, grad, grad_fn). Kernels only read shape/dtype/data.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "normlab/error.h"
#include "normlab/names.h"
#include "normlab/precision.h"

namespace normlab {

// bf16 and f16 hold the 16-bit encodings of precision.h's formats: native low-precision storage,
// which only the CUDA backends read and write (a low-precision scope on a CUDA device, ops.h);
// on the cpu the formats are emulated in float32 storage.
enum class DType : uint8_t { f32, f64, i32, bf16, f16 };
// "float32" (as PyTorch prints it), "f32" accepted.
template <>
const EnumNames& enum_names<DType>();
// cuda_sim: the CUDA backend's kernels run on the host by cuda-sim (docs/cuda.md), in device
// memory of its own: a device like cuda, never mixed with it.
enum class Device : uint8_t { cpu, cuda, cuda_sim };
constexpr int kDeviceCount = 3;
inline bool is_cuda_device(Device d) { return d == Device::cuda || d == Device::cuda_sim; }

size_t dtype_size(DType t);
// The 16-bit dtype that stores a low-precision format natively (bf16 -> bf16, fp16 -> f16), and
// back; f32 for fp32. format_of_dtype: the format a dtype's values lie on (f32/f64: fp32).
DType storage_dtype(Precision p);
Precision format_of_dtype(DType t);
inline bool is_16bit(DType t) { return t == DType::bf16 || t == DType::f16; }
// The encoding a 16-bit dtype stores v as (v rounded to float32, then to the format).
inline uint16_t encode_16(DType t, double v) { return to_bits(format_of_dtype(t), to_float(v)); }
// What values computed from a tensor of dtype t are kept in (statistics, a norm's mean and rstd,
// probabilities): float32 beside 16-bit storage, t itself otherwise.
inline DType statistics_dtype(DType t) { return is_16bit(t) ? DType::f32 : t; }
const char* device_name(Device d);

using Shape = std::vector<int64_t>;
int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "(2, 8, 64)"

// A block of memory from the arena of its device; given back to the arena, not to
// the system, when the last tensor using it goes away.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

class Node;  // autograd/tape.h
class Tensor;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  // bytes into storage
  Shape shape;
  DType dtype = DType::f32;
  Device device = Device::cpu;
  // The grid the values lie on: fp32, or bf16 / fp16 for a tensor an op stored in a low-precision
  // scope (ops.h, StoragePrecisionScope); its gradient is stored in the same format.
  Precision format = Precision::fp32;
  // Made by an op (which set `format`), with or without a recorded graph: in a low-precision
  // scope such a tensor is used as stored, where any other (a parameter, an input) is cast.
  bool op_output = false;
  // autograd
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;          // null for leaves
  std::shared_ptr<TensorImpl> grad;       // buffer kept across steps; see grad_valid
  bool grad_valid = false;                // zero_grad() clears this, keeping the buffer for reuse
  bool retain_grad = false;               // keep the gradient of a non-leaf after backward
  std::string name;                       // parameters: "blocks.3.norm1.gamma"
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialized memory from the arena.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  static Tensor full_on(const Shape& shape, double value, DType dtype, Device device);
  // Values converted to dtype (CPU). numel(shape) must equal values.size().
  static Tensor from(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32);
  static Tensor from_ids(const std::vector<int32_t>& ids, const Shape& shape);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t dim() const { return static_cast<int64_t>(impl().shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return shape_numel(impl().shape); }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().device; }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

  void* raw() const;
  template <class T>
  T* data() const;  // checks that T matches dtype

  // The values as doubles (a copy; a device tensor's are downloaded), and the single value of a
  // one-element tensor.
  std::vector<double> to_vector() const;
  double item() const;

  // A tensor sharing this storage with another shape (same numel); no copy, not recorded.
  Tensor view(const Shape& shape) const;
  // A view of `shape` starting `element_offset` elements into this tensor's storage.
  Tensor view_at(int64_t element_offset, const Shape& shape) const;
  // A deep copy (not recorded on the tape), optionally converted to another dtype.
  Tensor clone() const;
  Tensor to(DType dtype) const;
  // A copy on `device` (same dtype and shape; not recorded): cpu <-> cuda through the device's
  // memory hooks (register_device_memory). A tensor already there is copied too.
  Tensor to_device(Device device) const;
  // Moves this tensor's values to `device` in place (not recorded): its storage is replaced by a
  // copy there, so every holder of this tensor (a closure, a parameter list) sees the device
  // copy. For leaves and constants, before any graph is built on them.
  Tensor& move_to_device_(Device device);
  // Memory operations of the storage layer (not recorded, no backend): every element set to
  // `value`; src's bytes copied in (same dtype, device and element count).
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);

  // ---- autograd ---------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  // The accumulated gradient, or an undefined tensor when none has been computed.
  Tensor grad() const;
  void zero_grad();  // like PyTorch's set_to_none=True, but the buffer is reused
  Tensor& retain_grad();
  // Reverse-mode: d(this)/d(leaves). backward() needs a one-element tensor;
  // backward(seed) takes the upstream gradient of a tensor of any shape.
  void backward() const;
  void backward(const Tensor& seed) const;
  Tensor detach() const;  // same storage, no history
  const std::string& name() const { return impl().name; }
  Tensor& set_name(std::string n);

  TensorImpl& impl() const;
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};

template <class T>
T* Tensor::data() const {
  NL_CHECK(dtype() == dtype_of<T>::value, "tensor of dtype {} read as {}", to_string(dtype()),
           to_string(dtype_of<T>::value));
  return static_cast<T*>(raw());
}

// Arena statistics: `system_allocs` grows only when the arena has no cached block of the
// requested size; in a steady-state training step it must not grow at all.
struct ArenaStats {
  uint64_t requests = 0;        // Storage objects created
  uint64_t system_allocs = 0;   // blocks obtained from the system
  uint64_t bytes_reserved = 0;  // bytes held from the system (in use + cached)
  uint64_t bytes_in_use = 0;
};
ArenaStats arena_stats(Device device = Device::cpu);
// Gives cached blocks back to the system (tests; between unrelated experiments).
void arena_release_cached(Device device = Device::cpu);

// Hooks a device backend installs so that Storage can live on its device and be filled and
// copied there; the cpu's are the C library's.
struct DeviceMemory {
  void* (*allocate)(size_t bytes) = nullptr;
  void (*deallocate)(void* ptr) = nullptr;
  void (*fill)(void* dst, DType dtype, int64_t count, double value) = nullptr;
  void (*copy)(void* dst, const void* src, size_t bytes) = nullptr;
  // Host <-> device transfers (synchronous): dst on the device from host memory, and back.
  void (*upload)(void* dst_device, const void* src_host, size_t bytes) = nullptr;
  void (*download)(void* dst_host, const void* src_device, size_t bytes) = nullptr;
};
void register_device_memory(Device device, DeviceMemory memory);

}  // namespace normlab
