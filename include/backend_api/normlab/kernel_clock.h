// Where a piece of work spends its time, kernel by kernel: while a KernelClock runs on a thread,
// every kernel that thread calls through run_kernel is timed, and so is every region a backend
// marks inside its kernels (a cpu kernel's matrix products, say). Each name gets its exclusive
// time: a region's time less that of the regions it opens itself, so the times add up to the
// time spent inside kernels and nothing is counted twice.
//
//   KernelClock clock;                  // starts timing this thread's kernels
//   model_step();
//   for (const KernelClock::Entry& e : clock.entries()) ...   // name, calls, seconds
//
// Only the thread that started the clock is timed (a kernel's own worker threads are inside its
// time); a thread without a clock pays one thread-local load per kernel call. The clocks nest:
// the innermost running one is timed into.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace normlab {

class KernelClock {
 public:
  struct Entry {
    std::string name;
    int64_t calls = 0;
    double seconds = 0;  // exclusive: less the regions it opened
  };

  KernelClock();
  ~KernelClock();
  KernelClock(const KernelClock&) = delete;
  KernelClock& operator=(const KernelClock&) = delete;

  // Every name timed so far, in the order first seen.
  std::vector<Entry> entries() const;
  // Sum of all entries' seconds: the time spent inside timed regions.
  double total_seconds() const;

  // A timed region on the current thread: a no-op unless a clock runs there. `name` must outlive
  // the clock (a string literal).
  class Region {
   public:
    explicit Region(const char* name) : clock_(running()) {
      if (clock_) open(name);
    }
    ~Region() {
      if (clock_) close();
    }
    Region(const Region&) = delete;
    Region& operator=(const Region&) = delete;

   private:
    void open(const char* name);
    void close();
    KernelClock* clock_;
    const char* name_ = nullptr;
    Region* parent_ = nullptr;
    std::chrono::steady_clock::time_point start_;
    double children_ = 0;  // seconds of the regions opened inside this one
  };

 private:
  static KernelClock* running();
  size_t index_of(const char* name);
  void add(const char* name, double seconds);

  std::vector<Entry> entries_;
  std::vector<std::pair<const char*, size_t>> pointers_;  // name pointers seen -> entry
  KernelClock* outer_ = nullptr;  // the clock this one hides while it runs
  Region* open_ = nullptr;        // the innermost open region
};

}  // namespace normlab
