// What the variant tests share (tests/nn/variants_test.cpp, tests/train/variants_checkpoint_test.cpp):
// a small model config, random ids, and a model's loss on them without a graph.
#pragma once
#include <vector>

#include "normlab/autograd.h"
#include "normlab/nn.h"
#include "normlab/rng.h"

namespace normlab::test {

inline ModelConfig small_variant_config(int64_t layers = 4) {
  ModelConfig c;
  c.layers = layers;
  c.d_model = 16;
  c.d_hidden = 24;
  c.vocab = 11;
  c.seq_len = 6;
  c.heads = 2;
  return c;
}

inline Tensor ids_of(uint64_t seed, int64_t b, int64_t t, int64_t vocab) {
  Rng rng(seed, stream::data);
  std::vector<int32_t> v(static_cast<size_t>(b * t));
  for (int32_t& x : v) x = static_cast<int32_t>(rng.below(static_cast<uint32_t>(vocab)));
  return Tensor::from_ids(v, {b, t});
}

inline double loss_of(const Model& m, uint64_t seed) {
  NoGradGuard no_grad;
  const ModelConfig& c = m.config();
  return m.loss(ids_of(seed, 3, c.seq_len, c.vocab), ids_of(seed + 1, 3, c.seq_len, c.vocab)).item();
}

}  // namespace normlab::test
