// train's loss table, on core's table renderer.
#include <fmt/printf.h>

#include "normlab/table.h"
#include "normlab/train.h"

namespace normlab {

namespace {

const Table& loss_table() {
  static const Table t = [] {
    Table table;
    table.columns = {{"step", Align::right, 7},         {"lr", Align::right, 10, " "},
                     {"train", Align::right, 10, " "},  {"val", Align::right, 10, " "},
                     {"grad_norm", Align::right, 10, " "}, {"ms/step", Align::right, 11, " "},
                     {"tok/s", Align::right, 10, " "}};
    return table;
  }();
  return t;
}

}  // namespace

std::string loss_table_header() { return loss_table().text_header(); }

std::string loss_table_row(const EvalRecord& r) {
  return loss_table().text_line({std::to_string(r.step), fmt::sprintf("%.3g", r.lr), fmt::sprintf("%.4f", r.train_loss),
                                 fmt::sprintf("%.4f", r.val_loss), fmt::sprintf("%.3g", r.grad_norm),
                                 fmt::sprintf("%.3f", 1e3 * r.seconds_per_step),
                                 fmt::sprintf("%.0f", r.tokens_per_second)});
}

}  // namespace normlab
