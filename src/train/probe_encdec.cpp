// `probe xiong2020 --model encdec`: Xiong et al. 2020's Fig. 3 and Theorem 1 on the
// encoder-decoder Transformer of the paper's own setting (probe.h, XiongEncDecResult). The model
// is built and differentiated with the library's modules; this file reads the FFN weights'
// gradients back and reduces them.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "normlab/autograd.h"
#include "normlab/encdec.h"
#include "normlab/error.h"
#include "normlab/ops.h"
#include "normlab/backend.h"
#include "normlab/rng.h"
#include "probe_internal.h"

namespace normlab {

namespace {

// The paper's model at N layers per stack and `placement`, Xavier init, LayerNorm.
EncDecConfig paper_config(const XiongEncDecResult& shape, int64_t layers, Placement placement) {
  EncDecConfig c;
  c.model.norm = NormKind::layernorm;
  c.model.placement = placement;
  c.model.d_model = shape.d_model;
  c.model.d_hidden = shape.d_hidden;
  c.model.heads = shape.heads;
  c.model.vocab = shape.vocab;
  c.model.seq_len = shape.seq_len;
  c.model.init = InitScheme::xavier;
  c.encoder_layers = c.decoder_layers = layers;
  return c;
}

// One seed's batch of the copy task: source tokens uniform in [1, V); the decoder reads token 0
// then the source shifted right, and predicts the source.
struct CopyBatch {
  Tensor src, tgt_in, tgt_out;
};
CopyBatch copy_batch(int64_t batch, int64_t len, int64_t vocab, uint64_t seed) {
  Rng rng(seed, stream::data);
  std::vector<int32_t> src(static_cast<size_t>(batch * len)), in(src.size());
  for (int32_t& t : src) t = static_cast<int32_t>(1 + rng.below(static_cast<uint32_t>(vocab - 1)));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < len; ++t) in[static_cast<size_t>(b * len + t)] = t == 0 ? 0 : src[static_cast<size_t>(b * len + t - 1)];
  return {Tensor::from_ids(src, {batch, len}), Tensor::from_ids(in, {batch, len}), Tensor::from_ids(src, {batch, len})};
}

struct SeedGrads {
  double loss = 0;
  std::vector<double> encoder, decoder;  // ||dL/dW2|| per layer
};

SeedGrads seed_grads(const EncDecConfig& cfg, int64_t batch, uint64_t seed) {
  EncDecModel model(cfg, seed);
  // On the compute device (probe --device): the parameters and the batch live there.
  const Device device = compute_device();
  if (device != Device::cpu) model.params().flatten(device);
  const CopyBatch b = copy_batch(batch, cfg.model.seq_len, cfg.model.vocab, seed);
  const auto on = [device](const Tensor& t) { return device == Device::cpu ? t : t.to_device(device); };
  Tensor loss = model.loss(on(b.src), on(b.tgt_in), on(b.tgt_out));
  loss.backward();
  SeedGrads g;
  g.loss = loss.item();
  for (const EncoderLayer& l : model.encoder()) g.encoder.push_back(frobenius(l.mlp.fc2.w.grad()));
  for (const DecoderLayer& l : model.decoder()) g.decoder.push_back(frobenius(l.mlp.fc2.w.grad()));
  return g;
}

XiongEncDecRun probe_run(const XiongEncDecResult& shape, int64_t layers, Placement placement, const ProbeOptions& opt) {
  const EncDecConfig cfg = paper_config(shape, layers, placement);
  std::vector<SeedGrads> seeds;
  for (int s = 0; s < opt.seeds; ++s) seeds.push_back(seed_grads(cfg, opt.batch, static_cast<uint64_t>(s)));
  XiongEncDecRun run;
  run.placement = placement;
  run.layers = layers;
  run.loss = over(seeds, [](const SeedGrads& s) { return s.loss; });
  for (size_t l = 0; l < static_cast<size_t>(layers); ++l) {
    run.encoder_fc2.push_back(over(seeds, [l](const SeedGrads& s) { return s.encoder[l]; }));
    run.decoder_fc2.push_back(over(seeds, [l](const SeedGrads& s) { return s.decoder[l]; }));
  }
  run.encoder_ratio = over(seeds, [](const SeedGrads& s) { return ratio(s.encoder.back(), s.encoder.front()); });
  run.decoder_ratio = over(seeds, [](const SeedGrads& s) { return ratio(s.decoder.back(), s.decoder.front()); });
  return run;
}

// The verdict on one stack: Fig. 3 (Post-LN's last/first > 2 and above Pre-LN's, Pre-LN's within
// [1/2, 2], at every depth) and Theorem 1 (the last layer at the deepest depth over the shallowest).
std::string stack_verdict(const XiongEncDecResult& r, const char* stack, bool encoder) {
  bool grows = true, flat = true, above = true;
  for (size_t i = 0; i + 1 < r.runs.size(); i += 2) {
    const double post = (encoder ? r.runs[i].encoder_ratio : r.runs[i].decoder_ratio).mean;
    const double pre = (encoder ? r.runs[i + 1].encoder_ratio : r.runs[i + 1].decoder_ratio).mean;
    grows = grows && post > 2.0;
    flat = flat && pre >= 0.5 && pre <= 2.0;
    above = above && post > pre;
  }
  auto last = [&](const XiongEncDecRun& run) { return (encoder ? run.encoder_fc2 : run.decoder_fc2).back().mean; };
  const XiongEncDecRun &post0 = r.runs.front(), &pre0 = r.runs[1];
  const XiongEncDecRun &post1 = r.runs[r.runs.size() - 2], &pre1 = r.runs.back();
  std::string v = fmt::format(
      "{}: Post-LN's last/first {} (> 2) at every depth, Pre-LN's {} (within [0.5, 2]), Post-LN's {} Pre-LN's.", stack,
      grows ? "grows" : "does NOT grow", flat ? "is flat" : "is NOT flat", above ? "exceeds" : "does NOT exceed");
  if (r.depths.size() > 1)
    v += fmt::format(" Theorem 1, last layer at N = {} over N = {}: Post-LN {:.3g} (~1), Pre-LN {:.3g} (sqrt({}/{}) = {:.3g}).",
                     r.depths.back(), r.depths.front(), ratio(last(post1), last(post0)), ratio(last(pre1), last(pre0)),
                     r.depths.front(), r.depths.back(),
                     std::sqrt(static_cast<double>(r.depths.front()) / static_cast<double>(r.depths.back())));
  return v;
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.4g}", v) : "nan"; }
std::string pm(const Stat& s) { return fmt::format("{} ± {}", num(s.mean), num(s.std)); }

nlohmann::json stat_json(const Stat& s) {
  return {{"mean", std::isfinite(s.mean) ? nlohmann::json(s.mean) : nlohmann::json()},
          {"std", std::isfinite(s.std) ? nlohmann::json(s.std) : nlohmann::json()},
          {"n", s.n}};
}

}  // namespace

XiongEncDecResult probe_xiong_encdec(const ProbeOptions& opt, const std::vector<int64_t>& depths) {
  NL_USAGE(!depths.empty(), "--depths needs at least one depth");
  NL_USAGE(opt.seeds >= 1 && opt.batch >= 1, "--seeds and --batch must be >= 1");
  ThreadCountScope threads(opt.threads);
  XiongEncDecResult r;
  r.depths = depths;
  std::sort(r.depths.begin(), r.depths.end());
  r.depths.erase(std::unique(r.depths.begin(), r.depths.end()), r.depths.end());
  for (int64_t n : r.depths) NL_USAGE(n >= 2, "--depths: each depth must be >= 2 (a first and a last layer), got {}", n);
  for (int64_t n : r.depths)
    for (Placement p : {Placement::post, Placement::pre}) r.runs.push_back(probe_run(r, n, p, opt));
  r.verdict = "Xiong et al. 2020 (Fig. 3) on the encoder-decoder at its own setting. " +
              stack_verdict(r, "Encoder", true) + " " + stack_verdict(r, "Decoder", false);
  return r;
}

std::string xiong_encdec_text(const XiongEncDecResult& r, const ProbeOptions& opt) {
  std::string out = fmt::format(
      "Xiong et al. 2020, Fig. 3, encoder-decoder: d_model {}, FFN {}, {} heads, Xavier, LayerNorm; the copy task "
      "(vocabulary {}, {} tokens), batch {}, {} seed{}\n||dL/dW2|| of each FFN layer (mean ± std over seeds)\n\n",
      r.d_model, r.d_hidden, r.heads, r.vocab, r.seq_len, opt.batch, opt.seeds, opt.seeds == 1 ? "" : "s");
  for (const XiongEncDecRun& run : r.runs) {
    out += fmt::format("N = {} per stack, {}-LN (loss {})\n  layer  encoder            decoder\n", run.layers,
                       run.placement == Placement::post ? "Post" : "Pre", pm(run.loss));
    for (size_t l = 0; l < run.encoder_fc2.size(); ++l)
      out += fmt::format("  {:>5}  {:<18} {}\n", l + 1, pm(run.encoder_fc2[l]), pm(run.decoder_fc2[l]));
    out += fmt::format("  last/first: encoder {}, decoder {}\n\n", pm(run.encoder_ratio), pm(run.decoder_ratio));
  }
  return out + r.verdict + "\n";
}

nlohmann::json xiong_encdec_json(const XiongEncDecResult& r) {
  nlohmann::json runs = nlohmann::json::array();
  for (const XiongEncDecRun& run : r.runs) {
    nlohmann::json enc = nlohmann::json::array(), dec = nlohmann::json::array();
    for (const Stat& s : run.encoder_fc2) enc.push_back(stat_json(s));
    for (const Stat& s : run.decoder_fc2) dec.push_back(stat_json(s));
    runs.push_back({{"placement", to_string(run.placement)}, {"layers", run.layers}, {"loss", stat_json(run.loss)},
                    {"encoder_fc2_grad_norm", enc}, {"decoder_fc2_grad_norm", dec},
                    {"encoder_last_over_first", stat_json(run.encoder_ratio)},
                    {"decoder_last_over_first", stat_json(run.decoder_ratio)}});
  }
  return {{"d_model", r.d_model}, {"d_hidden", r.d_hidden}, {"heads", r.heads}, {"vocab", r.vocab},
          {"seq_len", r.seq_len}, {"depths", r.depths}, {"runs", runs}, {"verdict", r.verdict}};
}

}  // namespace normlab
