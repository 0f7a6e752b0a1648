// Text output shared by the subcommands: the loss table (train; sweep's children print none), its
// lines as the train library renders them, and the progress line on a terminal.
#pragma once
#include <string>
#include <cstdint>

#include "normlab/train.h"

namespace normlab::cli {

void print_loss_table_header();
void print_loss_table_row(const EvalRecord& r);
// "[#######      ] 120/3000 loss 2.3456" on stderr, redrawn in place.
void print_progress_line(int64_t step, int64_t steps, double loss);
void clear_progress_line();

// SVG files the commands write (`plot --out`, `probe --plot`): marked on their first line, so that
// a later command replaces only a file normlab's plotting wrote, never a person's.
void check_plot_file(const std::string& path, const std::string& flag);
void write_plot_file(const std::string& path, const std::string& svg, const std::string& flag);

}  // namespace normlab::cli
