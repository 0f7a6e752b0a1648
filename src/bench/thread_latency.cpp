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
  constexpr int64_t kTrips = 20000;  // ~1-8 ms per repeat
  constexpr int kRepeats = 5;
  std::atomic<int64_t>& turn = line.turn;
  double best = std::numeric_limits<double>::infinity();
  for (int rep = 0; rep < kRepeats; ++rep) {
    turn.store(0);
    double seconds = NAN;
#pragma omp parallel num_threads(2)
    {
      // Both threads must be there, or thread 0 would wait for an answer that never comes.
      if (omp_get_num_threads() == 2) {
        if (omp_get_thread_num() == 0) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int64_t i = 0; i < kTrips; ++i) {
            turn.store(2 * i + 1, std::memory_order_release);
            while (turn.load(std::memory_order_acquire) != 2 * i + 2) {
            }
          }
          seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        } else {
          for (int64_t i = 0; i < kTrips; ++i) {
            while (turn.load(std::memory_order_acquire) != 2 * i + 1) {
            }
            turn.store(2 * i + 2, std::memory_order_release);
          }
        }
      }
    }
    if (std::isfinite(seconds)) best = std::min(best, seconds / kTrips * 1e9);
  }
  return std::isfinite(best) ? best : NAN;
}

}  // namespace normlab::bench
