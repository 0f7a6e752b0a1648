// train's loss table: fixed-width lines, each printed when its evaluation ends.
#include <gtest/gtest.h>

#include "normlab/train.h"

TEST(LossTable, HeaderAndRowLineUp) {
  EXPECT_EQ(normlab::loss_table_header(), "   step         lr      train        val  grad_norm     ms/step      tok/s\n");
  normlab::EvalRecord r;
  r.step = 1500;
  r.lr = 3e-4;
  r.train_loss = 2.345678;
  r.val_loss = 2.5;
  r.grad_norm = 0.8731;
  r.seconds_per_step = 0.0123456;
  r.tokens_per_second = 41000.4;
  EXPECT_EQ(normlab::loss_table_row(r), "   1500     0.0003     2.3457     2.5000      0.873      12.346      41000\n");
}
