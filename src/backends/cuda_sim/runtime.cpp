// cuda-sim's runtime (cuda_sim.h, include/cuda_runtime.h): device memory, launches, blocks of
// fibers, barriers, warp exchange, shared memory. One kernel runs at a time, on the calling host
// thread; everything a kernel does is sequential underneath, so the simulator's own state needs
// no locks beyond the one that serializes API calls.
#include <sanitizer/common_interface_defs.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <boost/context/preallocated.hpp>
#include <boost/context/stack_context.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_sim.h"
#include "cuda_sim_control.h"
#include "include/cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
extern "C" void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
#else
#define CUDASIM_ASAN 0
#endif

namespace ctx = boost::context;

namespace cudasim {
namespace detail {

Thread* g_thread = nullptr;
Block* g_block = nullptr;
Launch* g_launch = nullptr;

}  // namespace detail

namespace {

std::recursive_mutex g_mu;  // every API call; kernels run under it

// ---- errors ---------------------------------------------------------------------------------------
cudaError_t g_last_error = cudaSuccess;
std::string g_last_detail;

cudaError_t set_error(cudaError_t e, std::string detail) {
  g_last_error = e;
  g_last_detail = std::move(detail);
  return e;
}

std::string fmt_dim(uint3 d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}
std::string fmt_dim(dim3 d) { return fmt_dim(uint3{d.x, d.y, d.z}); }

// ---- device memory --------------------------------------------------------------------------------
// One reserved region; [base, high) is mapped readable and writable only while a kernel, a copy
// or a cuBLAS call runs (Access), and PROT_NONE otherwise, so host code that dereferences a
// device pointer faults as it would on a GPU. Each allocation has kGuard bytes of a known
// pattern before it and at least kGuard after it (up to the next 256-byte boundary), checked
// after every launch and at cudaFree; new and freed memory is filled with 0xff (NaN as float).
constexpr size_t kReserve = size_t{64} << 30;
constexpr size_t kAlign = 256;
constexpr size_t kGuard = 256;
constexpr unsigned char kGuardByte = 0xfd;
constexpr unsigned char kPoisonByte = 0xff;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

struct Allocation {
  size_t bytes;  // as asked
  size_t total;  // the block, guards included
};

struct Heap {
  char* base = nullptr;
  size_t mapped = 0;  // [base, base + mapped) is in use as heap (page-rounded high-water mark)
  size_t top = 0;     // first byte never allocated
  std::map<char*, Allocation> live;       // by user pointer
  std::map<size_t, size_t> free_ranges;   // offset -> length, coalesced
  int open_depth = 0;
  size_t in_use = 0;

  bool init() {
    if (base) return true;
    void* p = mmap(nullptr, kReserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    base = static_cast<char*>(p);
    return true;
  }
  void protect(int prot) {
    if (mapped > 0 && mprotect(base, mapped, prot) != 0) {
      std::perror("cuda-sim: mprotect");
      std::abort();
    }
  }
  void open() {
    if (open_depth++ == 0) protect(PROT_READ | PROT_WRITE);
  }
  void close() {
    if (--open_depth == 0) protect(PROT_NONE);
  }
  // The allocation containing [p, p + bytes), or null.
  const std::pair<char* const, Allocation>* find(const void* p, size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    auto it = live.upper_bound(const_cast<char*>(c));
    if (it == live.begin()) return nullptr;
    --it;
    if (c < it->first || c + bytes > it->first + it->second.bytes) return nullptr;
    return &*it;
  }
  bool contains(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return base && c >= base && c < base + kReserve;
  }
};

Heap& heap() {
  static Heap* h = new Heap();  // leaked: device memory outlives static destructors
  return *h;
}

struct Access {
  Access() { heap().open(); }
  ~Access() { heap().close(); }
  Access(const Access&) = delete;
  Access& operator=(const Access&) = delete;
};

void* heap_allocate(size_t bytes) {
  Heap& h = heap();
  const size_t total = kGuard + round_up(std::max<size_t>(bytes, 1), kAlign) + kGuard;
  size_t offset = SIZE_MAX;
  for (auto it = h.free_ranges.begin(); it != h.free_ranges.end(); ++it) {
    if (it->second >= total) {
      offset = it->first;
      const size_t rest = it->second - total;
      h.free_ranges.erase(it);
      if (rest > 0) h.free_ranges[offset + total] = rest;
      break;
    }
  }
  if (offset == SIZE_MAX) {
    if (h.top + total > kReserve) return nullptr;
    offset = h.top;
    h.top += total;
    const size_t want = round_up(h.top, static_cast<size_t>(sysconf(_SC_PAGESIZE)));
    if (want > h.mapped) {
      const size_t old = h.mapped;
      h.mapped = want;
      // The new pages join the region with the protection it has now.
      if (mprotect(h.base + old, want - old, h.open_depth > 0 ? PROT_READ | PROT_WRITE : PROT_NONE) != 0)
        return nullptr;
    }
  }
  char* block = h.base + offset;
  char* user = block + kGuard;
  {
    Access a;
    std::memset(block, kGuardByte, kGuard);
    std::memset(user, kPoisonByte, bytes);
    std::memset(user + bytes, kGuardByte, total - kGuard - bytes);
  }
  h.live[user] = Allocation{bytes, total};
  h.in_use += bytes;
  return user;
}

// The first guard byte of `a` that is not the pattern: "n bytes before" / "n bytes after" the
// allocation, or empty. Called with access open.
std::string guard_damage(char* user, const Allocation& a) {
  const char* block = user - kGuard;
  for (size_t i = 0; i < kGuard; ++i)
    if (static_cast<unsigned char>(block[i]) != kGuardByte)
      return "a write " + std::to_string(kGuard - i) + " bytes before";
  const size_t after = a.total - kGuard - a.bytes;
  for (size_t i = 0; i < after; ++i)
    if (static_cast<unsigned char>(user[a.bytes + i]) != kGuardByte)
      return "a write " + std::to_string(i) + " bytes past the end of";
  return {};
}

// Every live allocation's guards; the first damage found, described, or empty.
std::string check_all_guards() {
  Heap& h = heap();
  Access a;
  for (auto& [user, alloc] : h.live) {
    std::string d = guard_damage(user, alloc);
    if (!d.empty()) {
      char addr[32];
      std::snprintf(addr, sizeof addr, "%p", static_cast<void*>(user));
      // Repair, so that one overrun is reported once.
      std::memset(user - kGuard, kGuardByte, kGuard);
      std::memset(user + alloc.bytes, kGuardByte, alloc.total - kGuard - alloc.bytes);
      return d + " the " + std::to_string(alloc.bytes) + "-byte allocation at " + addr;
    }
  }
  return {};
}

// ---- kernels' attributes --------------------------------------------------------------------------
struct KernelInfo {
  size_t max_dynamic_smem = kSharedPerBlock;  // cudaFuncAttributeMaxDynamicSharedMemorySize
  size_t static_smem = 0;                     // the most a block of it declared so far
  bool attribute_set = false;
  bool ran = false;
};
std::unordered_map<const void*, KernelInfo>& kernels() {
  static auto* m = new std::unordered_map<const void*, KernelInfo>();
  return *m;
}

// ---- fibers ---------------------------------------------------------------------------------------
// Stacks: mmap'd once and reused by every block, a PROT_NONE page below each so that an overflow
// faults. ASan's frames are larger.
constexpr size_t kStackSize = CUDASIM_ASAN ? 512 * 1024 : 128 * 1024;

struct StackPool {
  std::vector<char*> stacks;
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* get(size_t i) {
    while (stacks.size() <= i) {
      void* p = mmap(nullptr, kStackSize + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (p == MAP_FAILED) return nullptr;
      mprotect(p, page, PROT_NONE);
      stacks.push_back(static_cast<char*>(p) + page);
    }
    return stacks[i];
  }
  // After a block was abandoned mid-way its frames' ASan poisoning is stale.
  void unpoison() {
#if CUDASIM_ASAN
    for (char* s : stacks) __asan_unpoison_memory_region(s, kStackSize);
#endif
  }
};
StackPool& stacks() {
  static auto* p = new StackPool();
  return *p;
}

struct NoopStackAllocator {
  ctx::stack_context allocate() { return {}; }
  void deallocate(ctx::stack_context&) {}
};

enum class State : uint8_t { ready, at_block_barrier, at_warp_barrier, done, faulted };

struct SimThread : detail::Thread {
  // The fiber's continuation, held by the scheduler while the thread is suspended. In a union so
  // that an abandoned fiber (a faulted block) is never destroyed: destroying it would unwind
  // its stack through kernel code.
  union Slot {
    ctx::fiber f;
    Slot() {}
    ~Slot() {}
  } fib, sink;  // sink: the scheduler's continuation, held by the thread while it runs
  State state = State::ready;
  const char* waiting_for = nullptr;
  void* fake_stack = nullptr;
  char* stack = nullptr;
};

struct WarpState {
  uint32_t ready = 0;     // lanes that can run
  uint32_t exists = 0;    // lanes this block has
  uint32_t arrived = 0;   // lanes waiting at the pending warp barrier
  uint32_t expected = 0;  // its mask
  const char* op = nullptr;
  unsigned generation = 0;
  uint64_t slots[2][32];  // exchange values, by generation parity
};

struct BlockRun : detail::Block {
  std::unique_ptr<SimThread[]> threads;  // not movable (the fiber slots): allocated, never resized
  size_t capacity = 0;
  std::vector<WarpState> warps;
  unsigned nthreads = 0;
  unsigned at_barrier = 0;
  bool reverse = false;  // highest warp first
  std::string fault;
  // shared memory: [0, dynamic) dynamic, then the static declarations
  unsigned char* smem = nullptr;
  size_t dynamic = 0, static_base = 0, static_used = 0;
  KernelInfo* info = nullptr;
};

struct LaunchRun : detail::Launch {
  const char* name = "";
  void (*body)(void*) = nullptr;
  void* ctx = nullptr;
};

BlockRun* g_run = nullptr;
LaunchRun* g_launch_run = nullptr;
[[maybe_unused]] void* g_sched_bottom = nullptr;
[[maybe_unused]] size_t g_sched_size = 0;
[[maybe_unused]] void* g_sched_fake = nullptr;

SimThread& me() { return *static_cast<SimThread*>(detail::g_thread); }

void make_ready(BlockRun& b, unsigned t) {
  b.threads[t].state = State::ready;
  b.threads[t].waiting_for = nullptr;
  b.warps[t / 32].ready |= 1u << (t % 32);
}
void make_waiting(BlockRun& b, unsigned t, State s, const char* what) {
  b.threads[t].state = s;
  b.threads[t].waiting_for = what;
  b.warps[t / 32].ready &= ~(1u << (t % 32));
}

// The running thread gives the host thread back to the scheduler.
void yield() {
  SimThread& t = me();
#if CUDASIM_ASAN
  __sanitizer_start_switch_fiber(&t.fake_stack, g_sched_bottom, g_sched_size);
#endif
  ctx::fiber next = std::move(t.sink.f).resume();
  new (&t.sink.f) ctx::fiber(std::move(next));
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(t.fake_stack, nullptr, nullptr);
#endif
}

[[noreturn]] void fault_here(std::string what) {
  BlockRun& b = *g_run;
  if (b.fault.empty()) b.fault = std::move(what);
  SimThread& t = me();
  make_waiting(b, t.linear, State::faulted, "a fault");
  yield();
  std::abort();  // never resumed
}

std::string thread_name(const SimThread& t) { return "thread " + fmt_dim(t.idx); }

// A simulated thread's whole life on its fiber: the kernel's body, a C++ exception turned into
// the block's fault, then back to the scheduler for good.
ctx::fiber thread_main(SimThread* tp, ctx::fiber&& sink) {
#if CUDASIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, const_cast<const void**>(&g_sched_bottom), &g_sched_size);
#endif
  new (&tp->sink.f) ctx::fiber(std::move(sink));
  std::string error;
  try {
    g_launch_run->body(g_launch_run->ctx);
  } catch (const std::exception& e) {
    error = std::string("a C++ exception in the kernel: ") + e.what();
  } catch (...) {
    error = "a C++ exception in the kernel";
  }
  // After the handler: a handler never left (the fiber is never resumed) would stay the host
  // thread's current exception.
  if (!error.empty()) fault_here(std::move(error));
  BlockRun& br = *g_run;
  tp->state = State::done;
  br.warps[tp->linear / 32].ready &= ~(1u << (tp->linear % 32));
#if CUDASIM_ASAN
  __sanitizer_start_switch_fiber(nullptr, g_sched_bottom, g_sched_size);
#endif
  ctx::fiber back = std::move(tp->sink.f);
  tp->sink.f.~fiber();
  return back;
}

// Every thread of the block ready at the kernel's start, each on a fiber of its own stack; false
// (with b.fault set) when a stack cannot be mapped.
bool start_threads(BlockRun& b, const LaunchRun& l) {
  const size_t n = b.nthreads;
  if (b.capacity < n) {
    b.threads.reset(new SimThread[n]);
    b.capacity = n;
  }
  b.warps.assign((n + 31) / 32, WarpState{});
  b.at_barrier = 0;
  b.fault.clear();
  for (unsigned i = 0; i < n; ++i) {
    SimThread& t = b.threads[i];
    t.state = State::ready;
    t.waiting_for = nullptr;
    t.fake_stack = nullptr;
    t.linear = i;
    t.idx = uint3{i % l.block.x, (i / l.block.x) % l.block.y, i / (l.block.x * l.block.y)};
    t.shared_cursor = b.static_base;
    t.stack = stacks().get(i);
    if (!t.stack) {
      b.fault = "cannot map a stack for thread " + std::to_string(i);
      return false;
    }
    b.warps[i / 32].exists |= 1u << (i % 32);
    b.warps[i / 32].ready |= 1u << (i % 32);
    ctx::stack_context sc;
    sc.size = kStackSize;
    sc.sp = t.stack + kStackSize;
    SimThread* tp = &t;
    new (&t.fib.f) ctx::fiber(std::allocator_arg, ctx::preallocated(sc.sp, sc.size, sc), NoopStackAllocator{},
                              [tp](ctx::fiber&& sink) { return thread_main(tp, std::move(sink)); });
  }
  return true;
}

// Runs the block's threads until none is ready or one faults. Depth first: the first warp in
// priority order that can run, its lowest ready lane.
void schedule(BlockRun& b) {
  const size_t nw = b.warps.size();
  while (true) {
    size_t w = nw;
    for (size_t k = 0; k < nw; ++k) {
      const size_t cand = b.reverse ? nw - 1 - k : k;
      if (b.warps[cand].ready) {
        w = cand;
        break;
      }
    }
    if (w == nw) break;
    const unsigned lane = static_cast<unsigned>(__builtin_ctz(b.warps[w].ready));
    SimThread& t = b.threads[w * 32 + lane];
    detail::g_thread = &t;
#if CUDASIM_ASAN
    __sanitizer_start_switch_fiber(&g_sched_fake, t.stack, kStackSize);
#endif
    ctx::fiber back = std::move(t.fib.f).resume();
#if CUDASIM_ASAN
    __sanitizer_finish_switch_fiber(g_sched_fake, nullptr, nullptr);
#endif
    new (&t.fib.f) ctx::fiber(std::move(back));
    if (!b.fault.empty()) break;
  }
  detail::g_thread = nullptr;
}

// Why a block whose threads all wait can never finish: who waits at which barrier.
std::string describe_deadlock(const BlockRun& b) {
  const size_t n = b.nthreads;
  unsigned done = 0, at_block = 0, at_warp = 0;
  const SimThread* first_warp_waiter = nullptr;
  for (size_t i = 0; i < n; ++i) {
    const SimThread& t = b.threads[i];
    if (t.state == State::done) ++done;
    if (t.state == State::at_block_barrier) ++at_block;
    if (t.state == State::at_warp_barrier) {
      ++at_warp;
      if (!first_warp_waiter) first_warp_waiter = &t;
    }
  }
  std::string s;
  if (at_block > 0) {
    s = "__syncthreads() reached by " + std::to_string(at_block) + " of " + std::to_string(n) + " threads";
    if (done > 0) s += "; " + std::to_string(done) + " exited without reaching it";
    if (at_warp > 0)
      s += "; " + std::to_string(at_warp) + " wait at " + first_warp_waiter->waiting_for + " (" +
           thread_name(*first_warp_waiter) + " first)";
  } else {
    const WarpState& ws = b.warps[first_warp_waiter->linear / 32];
    s = std::string(first_warp_waiter->waiting_for) + " in warp " + std::to_string(first_warp_waiter->linear / 32) +
        " reached by lanes 0x";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%08x of mask 0x%08x", ws.arrived, ws.expected);
    s += buf;
    if (done > 0) s += "; " + std::to_string(done) + " threads of the block exited";
  }
  return s + ": the block can never finish";
}

// Runs one block to its end; false (with b.fault set) when it cannot finish.
bool run_block(BlockRun& b, LaunchRun& l) {
  if (!start_threads(b, l)) return false;
  schedule(b);
  const size_t n = b.nthreads;
  size_t done = 0;
  for (size_t i = 0; i < n; ++i) done += b.threads[i].state == State::done;
  // Everyone done: the fibers are finished and hold nothing.
  if (done == n && b.fault.empty()) {
    for (size_t i = 0; i < n; ++i) b.threads[i].fib.f.~fiber();
    return true;
  }
  if (b.fault.empty()) b.fault = describe_deadlock(b);
  b.fault += " (block " + fmt_dim(b.idx) + ")";
  // Abandon the unfinished fibers: never destroyed (that would unwind kernel frames); their
  // stacks are reused by the next block.
  for (size_t i = 0; i < n; ++i)
    if (b.threads[i].state == State::done) b.threads[i].fib.f.~fiber();
  stacks().unpoison();
  return false;
}

cudaError_t validate_launch(const char* name, dim3 grid, dim3 block, size_t dyn, KernelInfo& info) {
  const std::string k = std::string("cuda-sim: kernel ") + name + ": ";
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > kMaxBlockDimX || block.y > kMaxBlockDimY ||
      block.z > kMaxBlockDimZ || uint64_t{block.x} * block.y * block.z > kMaxThreadsPerBlock)
    return set_error(cudaErrorInvalidConfiguration,
                     k + "block " + fmt_dim(block) + " (at most 1024 threads, 1024 x 1024 x 64)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridDimX || grid.y > kMaxGridDimY ||
      grid.z > kMaxGridDimZ)
    return set_error(cudaErrorInvalidConfiguration, k + "grid " + fmt_dim(grid) + " (at most 2^31-1 x 65535 x 65535)");
  if (dyn > info.max_dynamic_smem)
    return set_error(cudaErrorInvalidValue,
                     k + std::to_string(dyn) + " bytes of dynamic shared memory, more than the kernel's limit of " +
                         std::to_string(info.max_dynamic_smem) +
                         (info.max_dynamic_smem <= kSharedPerBlock
                              ? " (above 48 KiB needs cudaFuncSetAttribute(MaxDynamicSharedMemorySize))"
                              : ""));
  return cudaSuccess;
}

}  // namespace

// ---- inside kernels -----------------------------------------------------------------------------
namespace detail {

void sync_block() {
  BlockRun& b = *g_run;
  SimThread& t = me();
  if (++b.at_barrier == b.nthreads) {
    b.at_barrier = 0;
    for (unsigned i = 0; i < b.nthreads; ++i)
      if (b.threads[i].state == State::at_block_barrier) make_ready(b, i);
    return;  // the last to arrive goes on
  }
  make_waiting(b, t.linear, State::at_block_barrier, "__syncthreads()");
  yield();
}

namespace {
// Arrives at the warp barrier of `mask`; returns once every lane of the mask has arrived, with
// the generation whose exchange slots hold their values.
unsigned warp_arrive(unsigned mask, uint64_t value, const char* what) {
  BlockRun& b = *g_run;
  SimThread& t = me();
  const unsigned w = t.linear / 32, lane = t.linear % 32;
  WarpState& ws = b.warps[w];
  if (!(mask & (1u << lane))) {
    // Named, so that the temporaries are gone before the fiber stops for good (they would leak).
    std::string s = std::string(what) + " called by " + thread_name(t) + ", a lane not in its mask";
    fault_here(std::move(s));
  }
  if (mask & ~ws.exists) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " with mask 0x%08x in warp %u, whose lanes are 0x%08x", mask, w, ws.exists);
    fault_here(std::string(what) + buf);
  }
  if (ws.arrived == 0) {
    ws.expected = mask;
    ws.op = what;
  } else if (ws.expected != mask) {
    char buf[128];
    std::snprintf(buf, sizeof buf, " with mask 0x%08x while lanes 0x%08x wait at %s with mask 0x%08x", mask,
                  ws.arrived, ws.op, ws.expected);
    fault_here(std::string(what) + " in warp " + std::to_string(w) + buf);
  }
  const unsigned gen = ws.generation;
  ws.slots[gen & 1][lane] = value;
  ws.arrived |= 1u << lane;
  if (ws.arrived == ws.expected) {
    ws.arrived = 0;
    ++ws.generation;
    for (unsigned l = 0; l < 32; ++l)
      if ((mask & (1u << l)) && b.threads[w * 32 + l].state == State::at_warp_barrier) make_ready(b, w * 32 + l);
    return gen;
  }
  make_waiting(b, t.linear, State::at_warp_barrier, what);
  yield();
  return gen;
}
}  // namespace

void sync_warp(unsigned mask, const char* what) { (void)warp_arrive(mask, 0, what); }

uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane, const char* what) {
  const unsigned gen = warp_arrive(mask, value, what);
  // One barrier per exchange suffices: a lane writes the other parity's slots next, and
  // overwrites this generation's only after every lane of the mask has arrived at the next one.
  if (src_lane < 0 || src_lane >= 32 || !(mask & (1u << src_lane)))
    fault_here(std::string(what) + " reads lane " + std::to_string(src_lane) + ", which is not in its mask");
  return g_run->warps[me().linear / 32].slots[gen & 1][src_lane];
}

unsigned warp_ballot(unsigned mask, bool pred, const char* what) {
  const unsigned gen = warp_arrive(mask, pred ? 1 : 0, what);
  const WarpState& ws = g_run->warps[me().linear / 32];
  unsigned r = 0;
  for (unsigned l = 0; l < 32; ++l)
    if ((mask & (1u << l)) && ws.slots[gen & 1][l]) r |= 1u << l;
  return r;
}

void* shared_static(size_t bytes, size_t align) {
  BlockRun& b = *g_run;
  SimThread& t = me();
  const size_t at = round_up(t.shared_cursor, align);
  t.shared_cursor = at + bytes;
  const size_t stat = t.shared_cursor - b.static_base;
  if (stat > b.static_used) {
    b.static_used = stat;
    if (stat > b.info->static_smem) b.info->static_smem = stat;
    if (stat > kSharedPerBlock)
      fault_here(std::to_string(stat) + " bytes of static __shared__ memory, more than the 48 KiB a block may declare");
    if (stat + b.dynamic > kSharedPerBlockOptin)
      fault_here(std::to_string(stat) + " bytes of static and " + std::to_string(b.dynamic) +
                 " of dynamic shared memory, more than the 227 KiB a block may have");
    if (!b.info->attribute_set && stat + b.dynamic > kSharedPerBlock)
      fault_here(std::to_string(stat) + " bytes of static and " + std::to_string(b.dynamic) +
                 " of dynamic shared memory, more than 48 KiB without cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  }
  return b.smem + at;
}

void* shared_dynamic() { return g_run->smem; }

void fault(const char* what) { fault_here(what); }

cudaError_t launch(const char* name, const void* kernel, dim3 grid, dim3 block, size_t dyn, void (*body)(void*),
                   void* ctx) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (g_run != nullptr) return set_error(cudaErrorLaunchFailure, std::string("cuda-sim: kernel ") + name + " launched from a kernel");
  KernelInfo& info = kernels()[kernel];
  if (cudaError_t e = validate_launch(name, grid, block, dyn, info); e != cudaSuccess) return e;
  LaunchRun l;
  l.grid = grid;
  l.block = block;
  l.name = name;
  l.body = body;
  l.ctx = ctx;
  BlockRun b;
  b.nthreads = block.x * block.y * block.z;
  b.info = &info;
  b.dynamic = dyn;
  b.static_base = round_up(dyn, 16);
  static std::vector<unsigned char>* smem = new std::vector<unsigned char>(kSharedPerBlockOptin + kSharedPerBlock + 64);
  b.smem = reinterpret_cast<unsigned char*>(round_up(reinterpret_cast<uintptr_t>(smem->data()), 16));
  g_launch_run = &l;
  detail::g_launch = &l;
  g_run = &b;
  std::string fault;
  {
    Access access;
    for (unsigned z = 0; z < grid.z && fault.empty(); ++z)
      for (unsigned y = 0; y < grid.y && fault.empty(); ++y)
        for (unsigned x = 0; x < grid.x && fault.empty(); ++x) {
          b.idx = uint3{x, y, z};
          detail::g_block = &b;
          b.reverse = ((x + y + z) & 1u) != 0;
          b.static_used = 0;
          // Uninitialized shared memory reads as NaN: all of it the first time a kernel runs,
          // then what it has been seen to use.
          const size_t poison = info.ran ? b.static_base + info.static_smem : smem->size() - 64;
          std::memset(b.smem, kPoisonByte, std::min(poison, smem->size() - 64));
          if (!run_block(b, l)) fault = b.fault;
          info.ran = true;
        }
  }
  g_run = nullptr;
  detail::g_block = nullptr;
  detail::g_launch = nullptr;
  g_launch_run = nullptr;
  if (!fault.empty()) return set_error(cudaErrorLaunchFailure, std::string("cuda-sim: kernel ") + name + ": " + fault);
  const std::string damage = check_all_guards();
  if (!damage.empty())
    return set_error(cudaErrorIllegalAddress, std::string("cuda-sim: kernel ") + name + ": " + damage);
  return cudaSuccess;
}

}  // namespace detail

// ---- control (cuda_sim_control.h) ---------------------------------------------------------------
void note_blas_error(std::string detail) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  g_last_detail = "cuda-sim: " + std::move(detail);
}

std::string last_error_detail() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return g_last_detail;
}

MemoryStats memory_stats() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  MemoryStats s;
  s.live_allocations = heap().live.size();
  s.bytes_in_use = heap().in_use;
  s.transfers = transfer_counter();
  return s;
}

TransferStats& transfer_counter() {
  static TransferStats t;
  return t;
}

bool is_device_pointer(const void* p) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return heap().find(p, 0) != nullptr;
}

bool device_range(const void* p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return bytes == 0 || heap().find(p, bytes) != nullptr;
}

void with_device_access(void (*fn)(void*), void* arg) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  Access a;
  fn(arg);
}

}  // namespace cudasim

// ---- the runtime API --------------------------------------------------------------------------------
using cudasim::g_mu;
using cudasim::heap;
using cudasim::set_error;

namespace {

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

std::string ptr_str(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

}  // namespace

const char* cudaGetErrorName(cudaError_t error) { return error_name(error); }
const char* cudaGetErrorString(cudaError_t error) { return error_string(error); }

cudaError_t cudaGetLastError() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  const cudaError_t e = cudasim::g_last_error;
  cudasim::g_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  return cudasim::g_last_error;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }  // every launch and copy is synchronous

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : set_error(cudaErrorInvalidDevice, "cuda-sim has one device, 0");
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return set_error(cudaErrorInvalidDevice, "cuda-sim has one device, 0");
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "cuda-sim (the host CPU with an H200's limits)");
  prop->totalGlobalMem = cudasim::kReserve;
  prop->sharedMemPerBlock = cudasim::kSharedPerBlock;
  prop->sharedMemPerBlockOptin = cudasim::kSharedPerBlockOptin;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = cudasim::kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = cudasim::kMaxBlockDimX;
  prop->maxThreadsDim[1] = cudasim::kMaxBlockDimY;
  prop->maxThreadsDim[2] = cudasim::kMaxBlockDimZ;
  prop->maxGridSize[0] = static_cast<int>(cudasim::kMaxGridDimX);
  prop->maxGridSize[1] = cudasim::kMaxGridDimY;
  prop->maxGridSize[2] = cudasim::kMaxGridDimZ;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = cudasim::kMultiprocessors;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device != 0) return set_error(cudaErrorInvalidDevice, "cuda-sim has one device, 0");
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = cudasim::kMaxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(cudasim::kSharedPerBlock); return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = cudasim::kMultiprocessors; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = static_cast<int>(cudasim::kSharedPerBlockOptin);
      return cudaSuccess;
  }
  return set_error(cudaErrorInvalidValue, "cuda-sim: device attribute " + std::to_string(attr) + " is not modelled");
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (ptr == nullptr) return set_error(cudaErrorInvalidValue, "cudaMalloc: null output pointer");
  *ptr = nullptr;
  if (!heap().init()) return set_error(cudaErrorMemoryAllocation, "cuda-sim: cannot reserve the device region");
  void* p = cudasim::heap_allocate(bytes);
  if (!p) return set_error(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(bytes) + "): the device region is full");
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (ptr == nullptr) return cudaSuccess;
  cudasim::Heap& h = heap();
  auto it = h.live.find(static_cast<char*>(ptr));
  if (it == h.live.end())
    return set_error(cudaErrorInvalidValue, "cudaFree(" + ptr_str(ptr) + "): not the start of a live device allocation");
  const cudasim::Allocation a = it->second;
  std::string damage;
  {
    cudasim::Access access;
    damage = cudasim::guard_damage(it->first, a);
    std::memset(it->first - cudasim::kGuard, cudasim::kPoisonByte, a.total);  // stale reads show as NaN
  }
  h.in_use -= a.bytes;
  const size_t off = static_cast<size_t>(it->first - cudasim::kGuard - h.base);
  h.live.erase(it);
  // Coalesce with the neighbours.
  size_t start = off, len = a.total;
  auto next = h.free_ranges.lower_bound(off);
  if (next != h.free_ranges.end() && next->first == off + len) {
    len += next->second;
    next = h.free_ranges.erase(next);
  }
  if (next != h.free_ranges.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      h.free_ranges.erase(prev);
    }
  }
  h.free_ranges[start] = len;
  if (!damage.empty())
    return set_error(cudaErrorIllegalAddress, "cudaFree: " + damage + " the " + std::to_string(a.bytes) +
                                                  "-byte allocation at " + ptr_str(ptr));
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  *total_bytes = cudasim::kReserve;
  *free_bytes = cudasim::kReserve - heap().in_use;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (bytes == 0) return cudaSuccess;
  cudasim::Heap& h = heap();
  if (kind == cudaMemcpyDefault)
    kind = h.contains(dst) ? (h.contains(src) ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                           : (h.contains(src) ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice)
    return set_error(cudaErrorInvalidMemcpyDirection, "cudaMemcpy: kind " + std::to_string(kind));
  auto check = [&](const void* p, bool dev, const char* which) -> std::string {
    if (dev && !h.find(p, bytes))
      return std::string("cudaMemcpy: the ") + which + " range [" + ptr_str(p) + ", +" + std::to_string(bytes) +
             ") is not inside one device allocation";
    if (!dev && h.contains(p))
      return std::string("cudaMemcpy: the ") + which + " " + ptr_str(p) + " is device memory but the kind says host";
    return {};
  };
  std::string e = check(dst, dst_dev, "destination");
  if (e.empty()) e = check(src, src_dev, "source");
  if (!e.empty()) return set_error(cudaErrorInvalidValue, e);
  cudasim::TransferStats& t = cudasim::transfer_counter();
  if (kind == cudaMemcpyHostToDevice) {
    ++t.uploads;
    t.upload_bytes += bytes;
  } else if (kind == cudaMemcpyDeviceToHost) {
    ++t.downloads;
    t.download_bytes += bytes;
  }
  cudasim::Access access;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (bytes == 0) return cudaSuccess;
  if (!heap().find(dst, bytes))
    return set_error(cudaErrorInvalidValue, "cudaMemset: [" + ptr_str(dst) + ", +" + std::to_string(bytes) +
                                                ") is not inside one device allocation");
  cudasim::Access access;
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

// Events: host time, taken when recorded (every launch before it has finished by then).
struct CUevent_st {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  event->at = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded) return set_error(cudaErrorInvalidValue, "cudaEventElapsedTime: an event was never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}

cudaError_t cudasim_func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  cudasim::KernelInfo& info = cudasim::kernels()[kernel];
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || static_cast<size_t>(value) + info.static_smem > cudasim::kSharedPerBlockOptin)
      return set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " +
                                                  std::to_string(value) + "): more than the 227 KiB a block may have");
    info.max_dynamic_smem = static_cast<size_t>(value);
    info.attribute_set = true;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
  return set_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute " + std::to_string(attr) + " is not modelled");
}

// An H200's multiprocessor: 2048 threads, 32 blocks, 228 KiB of shared memory (1 KiB of it
// reserved per block).
cudaError_t cudasim_occupancy(int* blocks, const void* kernel, int threads, size_t smem) {
  std::lock_guard<std::recursive_mutex> lock(g_mu);
  if (threads <= 0 || threads > 1024) return set_error(cudaErrorInvalidValue, "occupancy: block size out of range");
  const cudasim::KernelInfo& info = cudasim::kernels()[kernel];
  const size_t per_block = smem + info.static_smem + 1024;
  const int by_threads = 2048 / threads;
  const int by_smem = static_cast<int>(233472 / per_block);
  *blocks = std::max(0, std::min({by_threads, by_smem, 32}));
  return cudaSuccess;
}
