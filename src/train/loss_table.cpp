// train's loss table, on core's table renderer.
#include <fmt/printf.h>

#include <cmath>

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

const std::vector<EvalField>& eval_fields() {
  using R = EvalRecord;
  using M = EvalField::InMetrics;
  static const std::vector<EvalField> fields = {
      {"lr", &R::lr},
      {"train_loss", &R::train_loss},
      {"val_loss", &R::val_loss},
      {"grad_norm", &R::grad_norm},
      {"val_loss_se", &R::val_loss_se, nullptr, nullptr, M::always, true},
      {"val_oracle_loss", &R::val_oracle_loss, nullptr, nullptr, M::always, true},
      {"excess_loss", &R::excess_loss, nullptr, nullptr, M::always, true},
      {"excess_loss_se", &R::excess_loss_se, nullptr, nullptr, M::always, true},
      {"stream_norm", nullptr, &R::stream_norm},
      {"final_norm_out", &R::final_norm_out},
      {"block_grad_norm", nullptr, &R::block_grad_norm},
      {"attn_entropy", nullptr, &R::attn_entropy, nullptr, M::when_listed},
      {"attn_max_logit", nullptr, &R::attn_max_logit, nullptr, M::when_listed},
      {"loss_scale", &R::loss_scale, nullptr, nullptr, M::loss_scaled, true},
      {"skipped_steps", nullptr, nullptr, &R::skipped_steps, M::loss_scaled, true},
      {"stream_max_abs", nullptr, &R::stream_max_abs, nullptr, M::when_listed, true},
      {"norm_input_max_abs", nullptr, &R::norm_input_max_abs, nullptr, M::when_listed, true},
      {"overflow_share", nullptr, &R::overflow_share, nullptr, M::when_listed, true},
      {"underflow_share", nullptr, &R::underflow_share, nullptr, M::when_listed, true},
      {"seconds_per_step", &R::seconds_per_step, nullptr, nullptr, M::never},
      {"tokens_per_second", &R::tokens_per_second, nullptr, nullptr, M::never},
  };
  return fields;
}

std::string loss_table_header() { return loss_table().text_header(); }

std::string train_result_text(const TrainResult& r, const std::string& dir) {
  std::string s = fmt::sprintf("\nstatus %s", r.status);
  if (r.status == "diverged") s += fmt::sprintf(" at step %lld (%s)", static_cast<long long>(r.diverged_step), r.diverged_reason);
  if (r.status == "collapsed")
    s += fmt::sprintf(" from step %lld (validation loss at or above the unigram baseline - %.2f)",
                      static_cast<long long>(r.collapsed_step), kCollapseMargin);
  if (r.nonfinite.step >= 0) s += fmt::sprintf("\nfirst non-finite value: %s", r.nonfinite.str());
  if (std::isfinite(r.final_loss_scale))
    s += fmt::sprintf("\nloss scale %g at the end; %lld steps skipped (an inf or NaN gradient)", r.final_loss_scale,
                      static_cast<long long>(r.skipped_steps));
  s += fmt::sprintf("\nfinal val loss %.4f, best %.4f at step %lld; unigram %.4f; floor %.4f (gap %.4f)\n", r.final_val_loss,
                    r.best_val_loss, static_cast<long long>(r.best_val_step), r.unigram_loss, r.loss_floor, r.gap_to_floor());
  s += fmt::sprintf("%lld parameters, %.2f ms/step, %.0f tokens/s; run directory %s\n", static_cast<long long>(r.parameters),
                    1e3 * r.seconds_per_step, r.tokens_per_second, dir);
  return s;
}

std::string loss_table_row(const EvalRecord& r) {
  return loss_table().text_line({std::to_string(r.step), fmt::sprintf("%.3g", r.lr), fmt::sprintf("%.4f", r.train_loss),
                                 fmt::sprintf("%.4f", r.val_loss), fmt::sprintf("%.3g", r.grad_norm),
                                 fmt::sprintf("%.3f", 1e3 * r.seconds_per_step),
                                 fmt::sprintf("%.0f", r.tokens_per_second)});
}

}  // namespace normlab
