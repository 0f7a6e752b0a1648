// LayerNorm <-> RMSNorm conversion of a trained model.
//   naive  what community scripts do: keep each gamma as the RMSNorm gain, drop beta;
//   exact  function-preserving for models whose residual stream is written only by linear maps and
//          read only through norms (Pre-LN with the final norm): fold each norm's beta into the
//          bias of the linear that reads it (W(gamma xhat + beta) + b = W(gamma xhat) + (W beta + b);
//          the head gets a bias), and centre every writer of the stream (the embeddings' rows, each
//          output projection and fc2, their biases) over the model dimension. Every LayerNorm then
//          sees zero-mean input, where it equals an RMSNorm with the same eps and gain.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "normlab/nn.h"
#include "normlab/train.h"

namespace normlab {

enum class ConvertMethod { naive, exact };
template <>
const EnumNames& enum_names<ConvertMethod>();

struct Conversion {
  ModelConfig config;  // the converted model's: norm rmsnorm, the source's eps, head_bias for exact
  std::vector<std::pair<std::string, Tensor>> state;  // its parameters, PyTorch names (checkpoint.h)
};

// Why the method cannot convert a model of this config ("" when it can).
std::string conversion_refusal(const ModelConfig& cfg, ConvertMethod method);
// Throws UsageError with conversion_refusal's reason.
Conversion convert_layernorm_to_rmsnorm(Model& source, ConvertMethod method);

// RMSNorm -> LayerNorm: each gain kept, beta = 0, the same eps. A LayerNorm with beta = 0 equals the
// RMSNorm on zero-mean input, so this is exact exactly when every norm's input is zero-mean: when
// every writer of the residual stream is centred (stream_centred), as in a model that `exact`
// produced from a LayerNorm one (the round trip LN -> RMS -> LN preserves the logits).
Conversion convert_rmsnorm_to_layernorm(Model& source);
// Gemma's parametrization of every norm gain (gemma_norm: 1 + w, w stored) and the plain one
// (gamma stored), either way: w = gamma - 1 or gamma = 1 + w for each norm's gain (blocks, final,
// embedding and QK norms), everything else copied. The same function; in float32 the values agree
// exactly where gamma is in [0.5, 2] (gamma - 1 is then exact), and to an ulp of the gain elsewhere.
Conversion convert_gain_parametrization(Model& source, bool to_offset);

// Whether every writer of the residual stream (embedding rows, output projections and fc2, their
// biases) is zero-mean over the model dimension, to `tolerance` relative to its scale.
bool stream_centred(Model& model, double tolerance = 1e-6);

// Mean cross-entropy over the config's validation batches (eval_batches of batch_size).
double validation_loss(const TrainConfig& cfg, Model& model);

}  // namespace normlab
