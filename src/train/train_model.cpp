// The two kinds of model a run trains behind one interface (train_model.h).
#include "normlab/train_model.h"

#include <fmt/format.h>

namespace normlab {

namespace {

class DecoderOnly final : public TrainModel {
 public:
  DecoderOnly(const ModelConfig& cfg, uint64_t seed) : model_(cfg, seed) {}
  const ModelConfig& config() const override { return model_.config(); }
  ParamList& params() override { return model_.params(); }
  Tensor loss(const Batch& b, ForwardTrace* trace) const override { return model_.loss(b.inputs, b.targets, trace); }
  size_t layer_count() const override { return model_.blocks().size(); }
  const std::vector<Tensor>& layer_params(size_t l) const override { return model_.block_params(l); }
  Model* decoder_only() override { return &model_; }

 private:
  Model model_;
};

class EncoderDecoder final : public TrainModel {
 public:
  EncoderDecoder(const ModelConfig& cfg, uint64_t seed) : config_(cfg), model_(encdec_config(cfg), seed) {
    // Each layer's parameters are those under its prefix ("encoder.3.", "decoder.0.").
    auto collect = [&](const char* stack, int64_t layers) {
      for (int64_t l = 0; l < layers; ++l) {
        const std::string prefix = fmt::format("{}.{}.", stack, l);
        layer_params_.emplace_back();
        for (const Tensor& p : model_.params().all())
          if (p.name().rfind(prefix, 0) == 0) layer_params_.back().push_back(p);
      }
    };
    collect("encoder", model_.config().encoder_layers);
    collect("decoder", model_.config().decoder_layers);
  }
  const ModelConfig& config() const override { return config_; }
  ParamList& params() override { return model_.params(); }
  Tensor loss(const Batch& b, ForwardTrace* trace) const override {
    NL_CHECK(b.sources.defined(), "an encoder-decoder's batch needs its sources");
    if (!trace) return model_.loss(b.sources, b.inputs, b.targets);
    EncDecTrace t;
    Tensor loss = model_.loss(b.sources, b.inputs, b.targets, &t);
    trace->block_out = t.encoder_out;
    trace->block_out.insert(trace->block_out.end(), t.decoder_out.begin(), t.decoder_out.end());
    trace->final_out = t.decoder_final;
    return loss;
  }
  size_t layer_count() const override { return layer_params_.size(); }
  const std::vector<Tensor>& layer_params(size_t l) const override { return layer_params_[l]; }
  EncDecModel* encoder_decoder() override { return &model_; }

 private:
  ModelConfig config_;  // as the run's config gives it (model encdec, its stacks' keys)
  EncDecModel model_;
  std::vector<std::vector<Tensor>> layer_params_;
};

}  // namespace

std::unique_ptr<TrainModel> make_train_model(const ModelConfig& cfg, uint64_t seed) {
  if (cfg.model == ModelKind::encdec) return std::make_unique<EncoderDecoder>(cfg, seed);
  return std::make_unique<DecoderOnly>(cfg, seed);
}

}  // namespace normlab
