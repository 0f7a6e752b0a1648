#include "normlab/kernel_clock.h"

#include <cstring>
#include <numeric>

namespace normlab {

namespace {
thread_local KernelClock* t_running = nullptr;
}  // namespace

KernelClock::KernelClock() : outer_(t_running) { t_running = this; }

KernelClock::~KernelClock() { t_running = outer_; }

KernelClock* KernelClock::running() { return t_running; }

std::vector<KernelClock::Entry> KernelClock::entries() const { return entries_; }

double KernelClock::total_seconds() const {
  return std::accumulate(entries_.begin(), entries_.end(), 0.0,
                         [](double s, const Entry& e) { return s + e.seconds; });
}

// The same name may come through several pointers (a string literal in each translation unit):
// pointers are looked up first (a few ns), names only for a pointer not seen before.
size_t KernelClock::index_of(const char* name) {
  for (const auto& [pointer, index] : pointers_)
    if (pointer == name) return index;
  size_t index = 0;
  while (index < entries_.size() && entries_[index].name != name) ++index;
  if (index == entries_.size()) entries_.push_back({name, 0, 0.0});
  pointers_.emplace_back(name, index);
  return index;
}

void KernelClock::add(const char* name, double seconds) {
  Entry& entry = entries_[index_of(name)];
  entry.calls += 1;
  entry.seconds += seconds;
}

void KernelClock::Region::open(const char* name) {
  name_ = name;
  parent_ = clock_->open_;
  clock_->open_ = this;
  start_ = std::chrono::steady_clock::now();
}

void KernelClock::Region::close() {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  clock_->open_ = parent_;
  if (parent_) parent_->children_ += seconds;
  clock_->add(name_, seconds - children_);
}

}  // namespace normlab
