// Training with dropout: deterministic from the seed, different from training without it, and a
// resumed run draws the masks the run that never stopped drew.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "normlab/checkpoint.h"
#include "normlab/nn.h"
#include "normlab/train.h"
#include "normlab/train_model.h"
#include "test_util.h"

using namespace normlab;

namespace {

TrainConfig tiny_run(double rate) {
  TrainConfig c;
  c.model.model = ModelKind::gpt;
  c.model.layers = 2;
  c.model.d_model = 16;
  c.model.d_hidden = 32;
  c.model.heads = 2;
  c.model.vocab = 32;
  c.model.seq_len = 8;
  c.batch_size = 4;
  c.steps = 8;
  c.eval_every = 4;
  c.eval_batches = 2;
  c.threads = 1;
  c.lr = 3e-3;
  if (rate > 0) c.dropout = rate;
  return c;
}

}  // namespace

TEST(DropoutTraining, IsDeterministicFromTheSeedAndNotTheSameAsWithout) {
  const TrainResult a = train(tiny_run(0.2), TrainHooks{}), b = train(tiny_run(0.2), TrainHooks{});
  const TrainResult none = train(tiny_run(0.0), TrainHooks{});
  EXPECT_EQ(a.final_train_loss, b.final_train_loss);
  EXPECT_EQ(a.final_val_loss, b.final_val_loss);
  EXPECT_NE(a.final_train_loss, none.final_train_loss);
  // Evaluation runs without dropout: the initial model (steps 0) evaluates the same with it.
  TrainConfig initial = tiny_run(0.5), plain = tiny_run(0.0);
  initial.steps = plain.steps = 0;
  EXPECT_EQ(train(initial, TrainHooks{}).final_val_loss, train(plain, TrainHooks{}).final_val_loss);
}

// A run resumed from step 4 draws step 5's masks as the run that never stopped did.
TEST(DropoutTraining, AResumedRunDrawsTheSameMasks) {
  const TrainConfig cfg = tiny_run(0.2);
  const TrainResult whole = train(cfg, TrainHooks{});
  const auto dir = test::fresh_dir("dropout_resume");
  std::filesystem::create_directories(dir);
  ResumePoint point;
  TrainHooks h;
  h.checkpoint_every = 4;
  h.on_checkpoint = [&](int64_t step, TrainModel& model, const TrainState& st) {
    if (step != 4) return;
    point.weights = (dir / "model.safetensors").string();
    save_safetensors(point.weights, model_state(model), {});
    const std::string state = (dir / "state.safetensors").string();
    save_train_state(state, st);
    point.state = load_train_state(state);  // a copy: the run goes on updating its own
  };
  (void)train(cfg, h);
  ASSERT_FALSE(point.weights.empty());
  const TrainResult resumed = train(cfg, TrainHooks{}, &point);
  EXPECT_EQ(resumed.final_train_loss, whole.final_train_loss);
  EXPECT_EQ(resumed.final_val_loss, whole.final_val_loss);
}
