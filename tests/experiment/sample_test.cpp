// sample's draw of the next token: greedy at temperature 0, nanoGPT's top-k cut, and draws that
// follow the softmax of logits / temperature.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/rng.h"
#include "normlab/sample.h"

using namespace normlab;

TEST(SampleDraw, TemperatureZeroIsTheFirstLargestLogit) {
  Rng rng(0, stream::sample);
  EXPECT_EQ(draw_token({0.5f, 2.0f, -1.0f, 2.0f}, 0.0, 0, rng), 1);
  EXPECT_EQ(draw_token({3.0f}, 0.0, 0, rng), 0);
  // top_k 1 leaves the largest alone at any temperature.
  for (int i = 0; i < 50; ++i) EXPECT_EQ(draw_token({0.1f, 0.3f, 0.2f}, 5.0, 1, rng), 1);
}

// Over many draws each token's share is its softmax probability (within 4 standard errors), the
// temperature flattening or sharpening it, and top_k removing all but the k largest (every logit
// tied with the k-th kept, as nanoGPT's `logits < v[-1]`).
TEST(SampleDraw, DrawsFollowTheTemperedSoftmaxOfTheTopK) {
  const std::vector<float> logits = {0.0f, std::log(3.0f), -1.0f, std::log(3.0f) - 0.5f};
  auto shares = [&](double temperature, int64_t k) {
    Rng rng(7, stream::sample);
    std::vector<double> n(logits.size(), 0.0);
    const int draws = 20000;
    for (int i = 0; i < draws; ++i) n[static_cast<size_t>(draw_token(logits, temperature, k, rng))] += 1.0 / draws;
    return n;
  };
  auto expect_shares = [&](double temperature, int64_t k, const std::vector<double>& kept) {
    std::vector<double> p(logits.size(), 0.0);
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i) sum += kept[i] * std::exp(logits[i] / temperature);
    for (size_t i = 0; i < logits.size(); ++i) p[i] = kept[i] * std::exp(logits[i] / temperature) / sum;
    const std::vector<double> got = shares(temperature, k);
    for (size_t i = 0; i < p.size(); ++i)
      EXPECT_NEAR(got[i], p[i], 4 * std::sqrt(p[i] * (1 - p[i]) / 20000) + 1e-12)
          << "token " << i << " temperature " << temperature << " top_k " << k;
  };
  expect_shares(1.0, 0, {1, 1, 1, 1});
  expect_shares(0.5, 0, {1, 1, 1, 1});
  expect_shares(2.0, 0, {1, 1, 1, 1});
  expect_shares(1.0, 2, {0, 1, 0, 1});
  expect_shares(1.0, 4, {1, 1, 1, 1});
  // Ties with the k-th largest stay in.
  Rng rng(1, stream::sample);
  int zeros = 0;
  for (int i = 0; i < 2000; ++i) zeros += draw_token({1.0f, 1.0f, 0.0f}, 1.0, 1, rng) == 0;
  EXPECT_GT(zeros, 800);
  EXPECT_LT(zeros, 1200);
}
