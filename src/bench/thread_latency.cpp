// How far apart the first two OpenMP threads' cores are: the round trip of one cache line
// between them. Thread 0 writes a counter, thread 1 waits to see it and answers, and so on;
// each round trip is two transfers of the line from one core's cache to the other's.
//
// On a virtual machine the host decides which physical cores the vCPUs run on, and may move
// them: on the 2-vCPU Zen 4 guest of results/bench-cpu.md the round trip was 51-75 ns most of
// the time and 340-380 ns for stretches of minutes (the vCPUs on different core complexes),
// and every 2-thread training step of those stretches took ~50% longer (toy: 15 ms against 10),
// with the FMA loop on both vCPUs at full speed. Recorded in each benchmark's context, at its
// start and end, so that a run's multi-threaded figures can be read knowing which it was.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

#include "normlab/bench.h"

namespace normlab::bench {

namespace {
// The line the threads hand back and forth, alone in its 64 bytes (nothing else on it that a
// thread writes), and the counter on it.
struct alignas(64) Line {
  std::atomic<int64_t> turn{0};
};
Line line;
}  // namespace

double measure_thread_round_trip_ns() {
  if (omp_get_max_threads() < 2 || omp_get_num_procs() < 2) return NAN;
  constexpr int64_t kTrips = 20000;  // ~1-8 ms per repeat where the threads have a core each
  constexpr int kRepeats = 5;
  // Where the two threads share one core after all (a CPU quota below 2 CPUs), every hand-over
  // waits for a time slice: a repeat stops after this long, counting the trips it made.
  constexpr double kMaxSeconds = 0.02;
  constexpr int64_t kStop = -1;
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < kRepeats; ++rep) {
    line.turn.store(0);
    double seconds = NAN;
    int64_t trips = 0;
    // Inside the loops only `line` is shared: the results are written once at the end, since a
    // variable of this frame written every trip would put a second line in play (measured: 130-165
    // ns instead of 60-68).
#pragma omp parallel num_threads(2)
    {
      // Both threads must be there, or thread 0 would wait for an answer that never comes.
      if (omp_get_num_threads() == 2) {
        if (omp_get_thread_num() == 0) {
          const auto t0 = std::chrono::steady_clock::now();
          auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
          int64_t k = 0;
          for (; k < kTrips; ++k) {
            if ((k & 15) == 15 && elapsed() > kMaxSeconds) break;
            line.turn.store(2 * k + 1, std::memory_order_release);
            while (line.turn.load(std::memory_order_acquire) != 2 * k + 2) {
            }
          }
          const double s = elapsed();
          line.turn.store(kStop, std::memory_order_release);
          seconds = s;
          trips = k;
        } else {
          for (int64_t i = 0;; ++i) {
            int64_t v;
            while ((v = line.turn.load(std::memory_order_acquire)) != 2 * i + 1)
              if (v == kStop) break;
            if (v == kStop) break;
            line.turn.store(2 * i + 2, std::memory_order_release);
          }
        }
      }
    }
    if (std::isfinite(seconds) && trips > 0) best = std::min(best, seconds / static_cast<double>(trips) * 1e9);
  }
  return std::isfinite(best) ? best : NAN;
}

}  // namespace normlab::bench
