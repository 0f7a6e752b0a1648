// The cpu backend's oneDNN 2.6 state: one engine, one stream, and a cache of primitives keyed by
// everything that defines them, so that a steady-state training step creates none (creating
// one costs ~100 us, executing a small one ~3 us: docs/cpu-costs.md).
//
// Usage: build a PrimitiveKey from the numbers that define the primitive (cheap: no oneDNN
// object is made on a cache hit), then
//   run_primitive(key, make, describe, {ptr, ptr, ...});
// where make(engine) creates the primitive and lists its arguments (the pointers are given in
// that order) and describe() names it for messages. oneDNN errors become normlab::Error with the
// primitive and its shapes in the message.
#pragma once
#include <omp.h>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <dnnl.hpp>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace normlab::cpu {

// Everything that defines a primitive, as integers (floats by their bits). Built on every
// call, so it lives on the stack: no allocation on a cache hit. The OpenMP thread count is part
// of it: oneDNN fixes a primitive's parallel decomposition when it is created (its own cache keys
// on the thread count for that reason), so a primitive made at 1 thread and reused at 2 ran its
// products on one thread: `bench step`'s 2-thread toy step, run after its 1-thread pass, took
// 21.1-21.5 ms without the thread count in this key and 9.8-10.0 ms with it (Zen 4 guest).
class PrimitiveKey {
 public:
  static constexpr int kCapacity = 48;  // a 4-D matmul needs 2 + 3*(1+4+4) + 3 = 32
  explicit PrimitiveKey(int64_t kind) {
    add(kind);
    add(omp_get_max_threads());
  }
  PrimitiveKey& add(int64_t x) {
    if (size_ == kCapacity) overflow();
    v_[size_++] = x;
    return *this;
  }
  PrimitiveKey& add_float(float f) {
    uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    return add(static_cast<int64_t>(bits));
  }
  template <class It>
  PrimitiveKey& add_range(It first, It last) {
    for (; first != last; ++first) add(static_cast<int64_t>(*first));
    return *this;
  }
  bool operator==(const PrimitiveKey& o) const {
    return size_ == o.size_ && std::equal(v_, v_ + size_, o.v_);
  }
  size_t hash() const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the 64-bit words
    for (int i = 0; i < size_; ++i) h = (h ^ static_cast<uint64_t>(v_[i])) * 1099511628211ull;
    return static_cast<size_t>(h);
  }

 private:
  [[noreturn]] static void overflow();
  int64_t v_[kCapacity];
  int size_ = 0;
};

struct PrimitiveKeyHash {
  size_t operator()(const PrimitiveKey& k) const { return k.hash(); }
};

// What make() returns: the primitive and the memory descriptor of each argument, in the order
// run_primitive() will get the data pointers.
struct PrimitiveSpec {
  dnnl::primitive primitive;
  std::vector<std::pair<int, dnnl::memory::desc>> args;
  std::string impl;  // pd.impl_info_str(), for logs (DNNL_VERBOSE without the noise)
};

// A created primitive with one memory object per argument, reused call after call: only the
// data handles change, so a cache hit allocates nothing.
struct CachedPrimitive {
  dnnl::primitive primitive;
  std::vector<dnnl::memory> memories;          // in argument order
  std::unordered_map<int, dnnl::memory> args;  // the same objects, as execute() wants
  std::string what;                            // describe(), for errors
};

class OneDnn {
 public:
  static OneDnn& get();
  const dnnl::engine& engine() const { return engine_; }
  std::mutex& mutex() { return mutex_; }
  uint64_t created() const;
  CachedPrimitive* find(const PrimitiveKey& key);
  CachedPrimitive& insert(const PrimitiveKey& key, PrimitiveSpec spec, std::string what);
  void execute(CachedPrimitive& p, std::initializer_list<const void*> handles);

 private:
  OneDnn();
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mutex_;
  uint64_t created_ = 0;
  std::unordered_map<PrimitiveKey, std::unique_ptr<CachedPrimitive>, PrimitiveKeyHash> cache_;
};

[[noreturn]] void onednn_failed(const char* stage, const std::string& what, const dnnl::error& e);

// Finds or creates the primitive for `key` and executes it on the data pointers given in the
// order of PrimitiveSpec::args. The backend's one stream and the cached memory objects are
// shared, so calls are serialized by a mutex (uncontended in normlab: one run per process).
template <class Make, class Describe>
void run_primitive(const PrimitiveKey& key, Make&& make, Describe&& describe,
                   std::initializer_list<const void*> handles) {
  OneDnn& o = OneDnn::get();
  std::lock_guard<std::mutex> lock(o.mutex());
  CachedPrimitive* p = o.find(key);
  if (p == nullptr) {
    PrimitiveSpec spec;
    try {
      spec = make(o.engine());
    } catch (const dnnl::error& e) {
      onednn_failed("creating", describe(), e);
    }
    p = &o.insert(key, std::move(spec), describe());
  }
  o.execute(*p, handles);
}

// memory::dims from a pointer and a count (descriptors are built from small int64 arrays).
inline dnnl::memory::dims md_dims(const int64_t* v, int n) { return dnnl::memory::dims(v, v + n); }

}  // namespace normlab::cpu
