// Cross-entropy, mean over N rows (kernel.h): logits (N x V), targets (N) int32 (their range is
// each backend's check).
#pragma once
#include <cstdint>

#include "normlab/kernel.h"

namespace normlab {

// loss (one element) = mean_i [logsumexp(logits_i) - logits_i[target_i]]; probs = softmax (saved).
struct CrossEntropyForward {
  static constexpr const char* kName = "cross_entropy_forward";
  Tensor& loss;
  Tensor& probs;
  const Tensor& logits;
  const Tensor& targets;
  int64_t n;
  int64_t v;

  void check(const Contract& c) const {
    c.need(loss, "loss", 1).need(probs, "probs", n * v).need(logits, "logits", n * v);
    c.need(targets, "targets", n);
  }
};

// dlogits = dloss * (probs - onehot(target)) / N, dloss is a one-element tensor.
struct CrossEntropyBackward {
  static constexpr const char* kName = "cross_entropy_backward";
  Tensor& dlogits;
  const Tensor& dloss;
  const Tensor& probs;
  const Tensor& targets;
  int64_t n;
  int64_t v;

  void check(const Contract& c) const {
    c.need(dlogits, "dlogits", n * v).need(dloss, "dloss", 1).need(probs, "probs", n * v);
    c.need(targets, "targets", n);
  }
};

}  // namespace normlab
