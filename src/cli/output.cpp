#include "output.h"

#include <cstdio>

namespace normlab::cli {

void print_loss_table_header() {
  std::printf("%7s %10s %10s %10s %10s %11s %10s\n", "step", "lr", "train", "val", "grad_norm", "ms/step",
              "tok/s");
  std::fflush(stdout);
}

void print_loss_table_row(const EvalRecord& r) {
  std::printf("%7lld %10.3g %10.4f %10.4f %10.3g %11.3f %10.0f\n", static_cast<long long>(r.step), r.lr,
              r.train_loss, r.val_loss, r.grad_norm, 1e3 * r.seconds_per_step, r.tokens_per_second);
  std::fflush(stdout);
}

void print_progress_line(int64_t step, int64_t steps, double loss) {
  if (step % 10 != 0 && step != steps) return;
  const int width = 30;
  const int filled = static_cast<int>(width * step / steps);
  std::fprintf(stderr, "\r[%.*s%*s] %lld/%lld loss %.4f", filled, "##############################", width - filled,
               "", static_cast<long long>(step), static_cast<long long>(steps), loss);
  std::fflush(stderr);
}

void clear_progress_line() {
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
}

}  // namespace normlab::cli
