// Training in bf16 / fp16 (TrainConfig::precision): the run stores every activation and gradient
// in the format (StoragePrecisionScope around steps and evals) with float32 master weights; it is
// deterministic, differs from fp32, and learns about as well on the toy task.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/error.h"
#include "normlab/ops.h"
#include "normlab/train.h"

using namespace normlab;

namespace {

TrainConfig small_run() {
  TrainConfig c;
  c.model.layers = 2;
  c.model.d_model = 32;
  c.model.d_hidden = 64;
  c.batch_size = 16;
  c.steps = 200;
  c.eval_every = 100;
  c.eval_batches = 4;
  c.threads = 1;
  return c;
}

}  // namespace

TEST(TrainPrecision, Bf16AndFp16TrainDeterministicallyAndApartFromFp32) {
  TrainConfig f32 = small_run(), bf = small_run(), h = small_run();
  bf.precision = Precision::bf16;
  h.precision = Precision::fp16;
  const TrainResult r32 = train(f32), rb = train(bf), rh = train(h), rb2 = train(bf);
  EXPECT_EQ(storage_precision(), Precision::fp32);  // the run's scope ended with it
  for (const TrainResult* r : {&r32, &rb, &rh}) {
    ASSERT_EQ(r->status, "ok");
    ASSERT_TRUE(std::isfinite(r->final_val_loss));
    EXPECT_LT(r->final_val_loss, r->unigram_loss - 0.5) << "it learned";
  }
  EXPECT_EQ(rb.final_val_loss, rb2.final_val_loss);  // bit for bit
  EXPECT_NE(rb.final_val_loss, r32.final_val_loss);
  EXPECT_NE(rh.final_val_loss, r32.final_val_loss);
  EXPECT_NE(rb.final_val_loss, rh.final_val_loss);
  // Close to float32 on this small model: within a few hundredths of a nat.
  EXPECT_NEAR(rb.final_val_loss, r32.final_val_loss, 0.05);
  EXPECT_NEAR(rh.final_val_loss, r32.final_val_loss, 0.05);
}

TEST(TrainPrecision, NormComputeNeedsALowPrecisionAndFormatIsNotBuiltYet) {
  TrainConfig c = small_run();
  c.norm_compute = NormCompute::fp32;
  try {
    c.validate();
    ADD_FAILURE() << "norm_compute in fp32 was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("needs precision bf16 or fp16"), std::string::npos) << e.what();
  }
  c.precision = Precision::fp16;
  EXPECT_NO_THROW(c.validate());
  c.norm_compute = NormCompute::format;
  EXPECT_THROW(c.validate(), UsageError);
}
