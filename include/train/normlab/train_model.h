// The model a run trains, as the loop, its evals and its checkpoints see it: the decoder-only
// Model (nn.h) on language data, or the EncDecModel (encdec.h) on a sequence-to-sequence task.
#pragma once
#include <memory>
#include <vector>

#include "normlab/encdec.h"
#include "normlab/nn.h"
#include "normlab/train.h"

namespace normlab {

class TrainModel {
 public:
  virtual ~TrainModel() = default;
  virtual const ModelConfig& config() const = 0;
  virtual ParamList& params() = 0;
  // Mean cross-entropy of b's targets (b on the parameters' device). trace: the residual stream
  // after each layer (an encoder-decoder's encoder layers, then its decoder's), after the final
  // norm the head reads, and attention's taps (decoder-only).
  virtual Tensor loss(const Batch& b, ForwardTrace* trace = nullptr) const = 0;
  // The layers of the per-layer statistics, in the trace's order, and each one's parameters.
  virtual size_t layer_count() const = 0;
  virtual const std::vector<Tensor>& layer_params(size_t l) const = 0;
  // The model itself, for what only one kind does (sampling, conversion); null for the other.
  virtual Model* decoder_only() { return nullptr; }
  virtual EncDecModel* encoder_decoder() { return nullptr; }
};

// The model cfg describes, initialised from seed: an EncDecModel for model encdec, a Model otherwise.
std::unique_ptr<TrainModel> make_train_model(const ModelConfig& cfg, uint64_t seed);

}  // namespace normlab
