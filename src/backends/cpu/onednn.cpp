// The oneDNN engine, stream and primitive cache shared by the cpu backend's oneDNN kernels.
#include "onednn.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <atomic>

#include "normlab/cpu_backend.h"
#include "normlab/error.h"

namespace normlab::cpu {

OneDnn& OneDnn::get() {
  // Leaked on purpose: primitives must not be destroyed after oneDNN's own statics are.
  static OneDnn* instance = new OneDnn();
  return *instance;
}

OneDnn::OneDnn() {
  try {
    engine_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
    stream_ = dnnl::stream(engine_);
  } catch (const dnnl::error& e) {
    onednn_failed("creating", "the cpu engine and stream", e);
  }
}

void PrimitiveKey::overflow() {
  detail::check_failed(
      __FILE__, __LINE__,
      fmt::format("PrimitiveKey: more than {} numbers; raise kCapacity", kCapacity));
}

uint64_t OneDnn::created() const { return created_; }

CachedPrimitive* OneDnn::find(const PrimitiveKey& key) {
  auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : it->second.get();
}

CachedPrimitive& OneDnn::insert(const PrimitiveKey& key, PrimitiveSpec spec, std::string what) {
  auto p = std::make_unique<CachedPrimitive>();
  p->primitive = std::move(spec.primitive);
  p->what = std::move(what);
  try {
    for (auto& [id, md] : spec.args) {
      // No buffer yet: execute() sets the caller's pointer each time.
      dnnl::memory m(md, engine_, nullptr);
      p->memories.push_back(m);
      p->args.emplace(id, m);
    }
  } catch (const dnnl::error& e) {
    onednn_failed("creating the arguments of", p->what, e);
  }
  ++created_;
  spdlog::debug("oneDNN primitive #{}: {} -> {}", created_, p->what, spec.impl);
  auto& slot = cache_[key];
  slot = std::move(p);
  return *slot;
}

void OneDnn::execute(CachedPrimitive& p, std::initializer_list<const void*> handles) {
  NL_CHECK(handles.size() == p.memories.size(), "{}: {} data pointers for {} arguments", p.what,
           handles.size(), p.memories.size());
  try {
    size_t i = 0;
    // oneDNN takes void* for inputs too; it does not write them.
    for (const void* h : handles) p.memories[i++].set_data_handle(const_cast<void*>(h));
    p.primitive.execute(stream_, p.args);
    stream_.wait();
  } catch (const dnnl::error& e) {
    onednn_failed("executing", p.what, e);
  }
}

void onednn_failed(const char* stage, const std::string& what, const dnnl::error& e) {
  detail::check_failed(__FILE__, __LINE__,
                       fmt::format("oneDNN failed {} {}: {} (status {})", stage, what, e.what(),
                                   static_cast<int>(e.status)));
}

}  // namespace normlab::cpu

namespace normlab {

std::string onednn_version() {
  const dnnl_version_t* v = dnnl::version();
  return fmt::format("{}.{}.{}", v->major, v->minor, v->patch);
}

namespace {
std::atomic<bool> g_native_bf16_allowed{true};
}  // namespace

bool native_bf16_products() {
  static const bool has = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
  }();
  return has && g_native_bf16_allowed.load(std::memory_order_relaxed);
}

void set_native_bf16_products(bool allowed) { g_native_bf16_allowed.store(allowed); }

std::string onednn_isa() {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41: return "sse41";
    case isa::avx: return "avx";
    case isa::avx2: return "avx2";
    case isa::avx2_vnni: return "avx2_vnni";
    case isa::avx512_mic: return "avx512_mic";
    case isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case isa::avx512_core: return "avx512_core";
    case isa::avx512_core_vnni: return "avx512_core_vnni";
    case isa::avx512_core_bf16: return "avx512_core_bf16";
    case isa::avx512_core_amx: return "avx512_core_amx";
    case isa::all: return "all";
  }
  return fmt::format("isa {}", static_cast<int>(dnnl::get_effective_cpu_isa()));
}

}  // namespace normlab
