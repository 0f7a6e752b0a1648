// The noise both rule tasks share (data.cpp, seq2seq_data.cpp): a token is the rule's with
// probability 1 - p, else uniform over R ordinary tokens (which may give the rule's token too).
// Not a public header.
#pragma once
#include <cmath>

namespace normlab {

struct RuleNoise {
  double r, p;  // R ordinary tokens, the noise p
  double on_rule() const { return 1 - p + p / r; }  // the probability q of the rule's token
  // The Bayes predictor's cost of a target that is the rule's token, and of one that is not.
  double cost_on_rule() const { return -std::log(on_rule()); }
  double cost_off_rule() const { return p > 0 ? -std::log(p / r) : INFINITY; }
  // Its mean cost: the entropy -q log q - (R-1)(p/R) log(p/R); exactly 0 without noise.
  double entropy() const {
    if (p <= 0) return 0.0;
    const double q = on_rule();
    return -q * std::log(q) - (r - 1) * (p / r) * std::log(p / r);
  }
};

}  // namespace normlab
