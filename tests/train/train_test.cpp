// Training: the lr schedule and the synthetic task and its floor.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/train.h"

using namespace normlab;

TEST(TrainSchedule, WarmupThenConstantOrCosine) {
  TrainConfig c;
  c.lr = 1.0;
  c.warmup_steps = 10;
  c.steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(c, 50), 1.0);
  c.schedule = Schedule::cosine;
  EXPECT_DOUBLE_EQ(learning_rate(c, 10), 1.0);
  EXPECT_NEAR(learning_rate(c, 60), 0.5, 1e-12);
  EXPECT_NEAR(learning_rate(c, 110), 0.0, 1e-12);
}

// The floor is the cross-entropy of the true conditional distribution. Score an oracle that
// knows the topic permutations (recovered from the data: the most frequent successor of each
// (topic, token) pair) and check it reaches the analytic floor within sampling error.
TEST(TrainData, SyntheticFloorMatchesAnOracle) {
  SyntheticSpec spec{64, 4, 0.1, 3};
  auto data = make_synthetic(spec);
  const int64_t T = 16, R = 60;
  Rng rng(1, stream::data);
  std::vector<std::vector<std::vector<int>>> counts(4, std::vector<std::vector<int>>(R, std::vector<int>(R, 0)));
  for (int i = 0; i < 200; ++i) {
    Batch b = data->train_batch(rng, 32, T);
    auto in = b.inputs.to_vector(), tg = b.targets.to_vector();
    for (int64_t s = 0; s < 32; ++s) {
      int z = static_cast<int>(in[s * T]) - R;
      ASSERT_GE(z, 0);
      for (int64_t t = 1; t < T; ++t) counts[z][static_cast<int>(in[s * T + t])][static_cast<int>(tg[s * T + t])]++;
    }
  }
  const double p = 0.1, q = 1 - p + p / R;
  double total = 0;
  int64_t n = 0;
  Rng rng2(2, stream::data);
  for (int i = 0; i < 50; ++i) {
    Batch b = data->train_batch(rng2, 32, T);
    auto in = b.inputs.to_vector(), tg = b.targets.to_vector();
    for (int64_t s = 0; s < 32; ++s) {
      int z = static_cast<int>(in[s * T]) - R;
      total += std::log(static_cast<double>(R));  // first target: uniform
      ++n;
      for (int64_t t = 1; t < T; ++t) {
        auto& row = counts[z][static_cast<int>(in[s * T + t])];
        int rule = static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
        total += static_cast<int>(tg[s * T + t]) == rule ? -std::log(q) : -std::log(p / R);
        ++n;
      }
    }
  }
  EXPECT_NEAR(total / static_cast<double>(n), data->loss_floor(T), 0.03);
  EXPECT_NEAR(data->unigram_loss(), std::log(60.0), 1e-12);
  // Validation batches are fixed.
  EXPECT_EQ(data->val_batch(3, 2, T).inputs.to_vector(), data->val_batch(3, 2, T).inputs.to_vector());
}

