// The commands' one signal handler (cli_common.h: catch_interrupts).
#include <csignal>

#include "cli_common.h"

namespace normlab::cli {

namespace {
// The signal that asked the work to stop (0: none). The handler only records it.
volatile std::sig_atomic_t g_interrupt = 0;

extern "C" void on_interrupt(int sig) { g_interrupt = sig; }
}  // namespace

const volatile std::sig_atomic_t* catch_interrupts() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaction(sig, &sa, nullptr);
  return &g_interrupt;
}

}  // namespace normlab::cli
