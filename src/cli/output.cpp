#include "output.h"

#include "normlab/io.h"

#include <cstdio>

namespace normlab::cli {

void print_loss_table_header() {
  std::fputs(loss_table_header().c_str(), stdout);
  std::fflush(stdout);
}

void print_loss_table_row(const EvalRecord& r) {
  std::fputs(loss_table_row(r).c_str(), stdout);
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

namespace {
constexpr const char* kPlotMark = "<!-- normlab: plot -->";
bool is_plot_svg(const std::string& text) { return text.rfind(kPlotMark, 0) == 0; }
}  // namespace

void check_plot_file(const std::string& path, const std::string& flag) { check_output_file(path, flag, true, is_plot_svg); }

void write_plot_file(const std::string& path, const std::string& svg, const std::string& flag) {
  write_output_file(path, std::string(kPlotMark) + "\n" + svg, flag, true, is_plot_svg);
}

}  // namespace normlab::cli
