// `probe`: signal propagation at initialization (see include/train/normlab/probe.h for what each
// number means). Models are built and differentiated with the library's modules and ops; this
// file only reads the resulting tensors back and reduces them to norms, ratios and cosines.
#include "normlab/probe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/ops.h"
#include "normlab/stats.h"
#include "probe_internal.h"

namespace normlab {

template <>
const EnumNames& enum_names<Activation>() {
  static const EnumNames t{"activation",
                           {{Activation::linear, "linear", {}, "the identity: x_l = W_l x_{l-1}"},
                            {Activation::gelu, "gelu", {}, "x_l = gelu(W_l x_{l-1})"}}};
  return t;
}

double frobenius(const Tensor& t) {
  if (!t.defined()) return 0;
  return std::sqrt(sum_squares(t));
}

double ratio(double a, double b) { return b != 0 ? a / b : std::numeric_limits<double>::quiet_NaN(); }

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Per-layer numbers of one seed, before averaging.
struct SeedLayer {
  double act = 0, growth = 0, stream_grad = 0, input_grad = 0, block_grad = 0, fc2_grad = 0;
  double identity = 0, f = 0, share = 0, cosine = 0;
};

struct SeedProbe {
  double loss = 0, embed = 0, embed_grad = 0;
  std::vector<SeedLayer> layers;
  double final_in = 0, final_out = 0, final_in_grad = 0, final_out_grad = 0;
};


// On the compute device (set_compute_device: probe --device): the model's parameters and the
// batch live there, and every norm below is reduced there.
SeedProbe probe_one_seed(const TrainConfig& c, int64_t batch) {
  // In bf16 / fp16 the probe stores as a training step would (train's scope), and its backward
  // starts from the loss scale a scaled run would start with; every gradient statistic below is
  // divided by it again (an overflow at that scale shows as inf, as a skipped step would).
  StoragePrecisionScope storage(c.storage(), c.residual_storage(), c.norm_compute.value_or(NormCompute::fused));
  const double scale = c.loss_scaling() == LossScaling::dynamic ? c.loss_scaler_settings().init : 1.0;
  auto grad_norm = [scale](const Tensor& g) { return frobenius(g) / scale; };
  Model model(c.model, c.seed);
  const Device device = compute_device();
  if (device != Device::cpu) model.params().flatten(device);
  std::unique_ptr<DataSource> data = make_data_source(c);
  Rng data_rng(c.seed, stream::data);
  Batch b = data->train_batch(data_rng, batch, c.model.seq_len);
  const Tensor inputs = device == Device::cpu ? b.inputs : b.inputs.to_device(device);
  const Tensor targets = device == Device::cpu ? b.targets : b.targets.to_device(device);

  ForwardTrace trace;
  trace.retain_grads = true;
  Tensor logits = model.forward(inputs, &trace);
  trace.final_out.retain_grad();
  Tensor loss = cross_entropy(logits, targets);
  loss.backward(Tensor::full_on(loss.shape(), scale, loss.dtype(), loss.device()));

  SeedProbe r;
  r.loss = loss.item();
  r.embed = mean_token_norm(trace.embed);
  r.embed_grad = grad_norm(trace.embed.grad());
  const size_t n_layers = trace.block_out.size();
  r.layers.resize(n_layers);
  for (size_t l = 0; l < n_layers; ++l) {
    const Tensor& in = l == 0 ? trace.embed : trace.block_out[l - 1];
    SeedLayer& s = r.layers[l];
    s.act = mean_token_norm(trace.block_out[l]);
    s.growth = ratio(s.act, l == 0 ? r.embed : r.layers[l - 1].act);
    s.stream_grad = grad_norm(trace.block_out[l].grad());
    s.input_grad = grad_norm(in.grad());
    s.block_grad = params_grad_norm(model.block_params(l)) / scale;
    s.fc2_grad = grad_norm(model.blocks()[l].mlp.fc2.w.grad());
  }
  r.final_in = mean_token_norm(trace.block_out.back());
  r.final_out = mean_token_norm(trace.final_out);
  r.final_in_grad = grad_norm(trace.block_out.back().grad());
  r.final_out_grad = grad_norm(trace.final_out.grad());

  // The identity / F split of dL/dx_{l-1}, after every parameter gradient has been read: the
  // identity pass below runs the norms again and would add to their gamma/beta gradients.
  for (size_t l = 0; l < n_layers; ++l) {
    const Tensor& in = l == 0 ? trace.embed : trace.block_out[l - 1];
    const Tensor g = trace.block_out[l].grad();  // dL/dx_l, upstream of block l
    const std::vector<double> total = in.grad().to_vector();
    std::vector<double> identity(total.size(), 0.0);
    Tensor x = in.clone();  // a leaf with the block input's values
    x.requires_grad_(true);
    // The block with its sublayers held constant: its Jacobian is the identity path's.
    Tensor y = block_forward(model.blocks()[l], x, Sublayers::held);
    if (y.requires_grad()) {
      y.backward(g);
      if (x.grad().defined()) identity = x.grad().to_vector();
    }
    double ii = 0, ff = 0, fi = 0;
    for (size_t i = 0; i < total.size(); ++i) {
      const double f = total[i] - identity[i];  // F term = dL/dx - identity term
      ii += identity[i] * identity[i];
      ff += f * f;
      fi += f * identity[i];
    }
    SeedLayer& s = r.layers[l];
    s.identity = std::sqrt(ii) / scale;
    s.f = std::sqrt(ff) / scale;
    s.share = ratio(s.identity, s.identity + s.f);
    s.cosine = ii > 0 && ff > 0 ? fi / std::sqrt(ii * ff) : kNaN;  // the scale cancels
  }
  return r;
}

std::string model_label(const ModelConfig& m) {
  std::string s = fmt::format("{} {}-{} L={} init={}", to_string(m.model), to_string(m.placement), to_string(m.norm), m.layers,
                              to_string(m.init));
  if (!m.residual) s += " no-residual";
  // The variants (docs/variants.md) that the placement and norm do not name.
  if (m.residual_scale_kind() != ResidualScale::none) s += " " + std::string(to_string(m.residual_scale_kind()));
  if (m.placement == Placement::mixln) s += fmt::format(" post={}", m.mix_post());
  if (m.ln_scaled()) s += " ln-scaling";
  if (m.gain_offset()) s += " gemma";
  if (m.embedding_norm()) s += " embed-norm";
  return s;
}

}  // namespace

Stat summarize(const std::vector<double>& values) {
  Stat s;
  s.n = static_cast<int64_t>(values.size());
  if (values.empty()) return {kNaN, kNaN, 0};
  s.mean = mean(values);
  s.std = sample_std(values);
  if (std::isnan(s.mean)) s.std = kNaN;
  return s;
}

const std::vector<std::string>& probe_presets() {
  static const std::vector<std::string> names = {"plain-stack", "preln-growth", "xiong2020", "identity-share",
                                                 "batchnorm"};
  return names;
}

void check_probe_preset(const std::string& preset) {
  const auto& presets = probe_presets();
  NL_USAGE(preset == "all" || preset == "config" || std::find(presets.begin(), presets.end(), preset) != presets.end(),
           "unknown preset '{}': choose one of {}, all, config", shown(preset), fmt::join(presets, ", "));
}

void run_probe_preset(const ProbeRequest& req, ProbeResults& out) {
  check_probe_preset(req.preset);
  const bool all = req.preset == "all";
  ProbeReport& r = out.report;
  r.preset = req.preset;
  r.options = req.options;
  if (req.preset == "config") r.config = &(out.config = probe_config(req.config, req.options));
  if (all || req.preset == "plain-stack") {
    PlainStackOptions so;
    so.gains = req.gains;
    so.activation = req.activation;
    r.plain_stack = &(out.plain_stack = probe_plain_stack(so, req.options));
  }
  if (all || req.preset == "preln-growth") r.preln_growth = &(out.preln_growth = probe_preln_growth(req.options));
  if (req.preset == "xiong2020" && req.encdec) {
    r.xiong_encdec = &(out.xiong_encdec = probe_xiong_encdec(req.options, req.depths));
  } else if (all || req.preset == "xiong2020") {
    r.xiong = &(out.xiong = probe_xiong(req.options, req.depths));
    if (!req.inits.empty() || !req.widths.empty()) {
      const std::vector<InitScheme> inits = req.inits.empty() ? std::vector<InitScheme>{InitScheme::xavier} : req.inits;
      const std::vector<int64_t> widths = req.widths.empty() ? std::vector<int64_t>{64} : req.widths;
      r.xiong_factors = &(out.xiong_factors = probe_xiong_factors(req.options, inits, widths, req.depths));
    }
  }
  if (all || req.preset == "identity-share") r.identity_share = &(out.identity_share = probe_identity_share(req.options));
  if (all || req.preset == "batchnorm") r.batchnorm = &(out.batchnorm = probe_batchnorm(req.options));
}

std::vector<const ConfigProbe*> per_layer_probes(const ProbeReport& report) {
  std::vector<const ConfigProbe*> probes;
  if (report.config) probes.push_back(report.config);
  if (report.xiong)
    for (const XiongRun& r : report.xiong->runs) probes.push_back(&r.probe);
  if (report.identity_share)
    for (const ConfigProbe& p : report.identity_share->runs) probes.push_back(&p);
  return probes;
}

// ---- one configuration ---------------------------------------------------------------------

void check_probeable(const TrainConfig& config) {
  NL_USAGE(config.model.model != ModelKind::encdec, "probe config probes decoder-only models (model toy or gpt); the "
           "encoder-decoder's gradients at initialisation: `normlab probe xiong2020 --model encdec`");
}

ConfigProbe probe_config(const TrainConfig& config, const ProbeOptions& opt, const std::string& label) {
  check_probeable(config);
  config.validate();
  NL_USAGE(opt.seeds >= 1, "--seeds must be >= 1, got {}", opt.seeds);
  NL_USAGE(opt.batch >= 1, "--batch must be >= 1, got {}", opt.batch);
  NL_USAGE(opt.threads >= 0, "--threads must be >= 0 (0 = all cores), got {}", opt.threads);
  ThreadCountScope threads(opt.threads);

  std::vector<SeedProbe> seeds;
  for (int s = 0; s < opt.seeds; ++s) {
    TrainConfig c = config;
    c.seed = config.seed + static_cast<uint64_t>(s);
    seeds.push_back(probe_one_seed(c, opt.batch));
  }

  ConfigProbe p;
  p.label = label.empty() ? model_label(config.model) : label;
  if (config.storage() != Precision::fp32) p.label += std::string(" ") + to_string(config.storage());
  p.config = config;
  p.sqrt_d = std::sqrt(static_cast<double>(config.model.d_model));
  p.final_norm_on = config.model.final_norm_on();
  p.loss = over(seeds, [](const SeedProbe& s) { return s.loss; });
  p.embed_norm = over(seeds, [](const SeedProbe& s) { return s.embed; });
  p.embed_grad_norm = over(seeds, [](const SeedProbe& s) { return s.embed_grad; });
  const size_t n_layers = seeds[0].layers.size();
  for (size_t l = 0; l < n_layers; ++l) {
    auto at = [&](double SeedLayer::*field) {
      return over(seeds, [&](const SeedProbe& s) { return s.layers[l].*field; });
    };
    LayerProbe lp;
    lp.act_norm = at(&SeedLayer::act);
    lp.growth = at(&SeedLayer::growth);
    lp.stream_grad_norm = at(&SeedLayer::stream_grad);
    lp.input_grad_norm = at(&SeedLayer::input_grad);
    lp.block_grad_norm = at(&SeedLayer::block_grad);
    lp.fc2_grad_norm = at(&SeedLayer::fc2_grad);
    lp.identity_norm = at(&SeedLayer::identity);
    lp.f_norm = at(&SeedLayer::f);
    lp.identity_share = at(&SeedLayer::share);
    lp.cosine = at(&SeedLayer::cosine);
    p.layers.push_back(lp);
  }
  p.final_in_norm = over(seeds, [](const SeedProbe& s) { return s.final_in; });
  p.final_out_norm = over(seeds, [](const SeedProbe& s) { return s.final_out; });
  p.final_in_grad_norm = over(seeds, [](const SeedProbe& s) { return s.final_in_grad; });
  p.final_out_grad_norm = over(seeds, [](const SeedProbe& s) { return s.final_out_grad; });
  p.fc2_last_over_first =
      over(seeds, [](const SeedProbe& s) { return ratio(s.layers.back().fc2_grad, s.layers.front().fc2_grad); });
  p.block_last_over_first =
      over(seeds, [](const SeedProbe& s) { return ratio(s.layers.back().block_grad, s.layers.front().block_grad); });
  p.stream_last_over_embed = over(seeds, [](const SeedProbe& s) { return ratio(s.layers.back().act, s.embed); });
  return p;
}

// ---- preset 1: plain stack -----------------------------------------------------------------

PlainStackResult probe_plain_stack(const PlainStackOptions& so, const ProbeOptions& opt) {
  NL_USAGE(opt.seeds >= 1, "--seeds must be >= 1, got {}", opt.seeds);
  NL_USAGE(opt.batch >= 1, "--batch must be >= 1, got {}", opt.batch);
  NL_USAGE(so.layers >= 1 && so.d >= 2 && so.seq_len >= 1, "plain stack needs layers >= 1, d >= 2, seq_len >= 1");
  NL_USAGE(!so.gains.empty(), "plain stack needs at least one gain");
  for (double g : so.gains) NL_USAGE(g > 0 && std::isfinite(g), "gain must be > 0, got {}", g);

  NL_USAGE(opt.threads >= 0, "--threads must be >= 0 (0 = all cores), got {}", opt.threads);
  ThreadCountScope threads(opt.threads);
  PlainStackResult res;
  res.options = so;
  res.tokens = opt.batch * so.seq_len;
  res.sqrt_d = std::sqrt(static_cast<double>(so.d));
  const int64_t n = res.tokens, d = so.d, L = so.layers;
  const Tensor gamma = Tensor::full({d}, 1.0), beta = Tensor::full({d}, 0.0);
  const bool linear_act = so.activation == Activation::linear;

  for (int ln = 0; ln < 2; ++ln) {
    for (double gain : so.gains) {
      // Per seed: [l] activation norm, weight and input gradient norms.
      std::vector<std::vector<double>> act(static_cast<size_t>(L + 1)), wg(static_cast<size_t>(L)),
          xg(static_cast<size_t>(L));
      std::vector<double> last_over_input;
      for (int s = 0; s < opt.seeds; ++s) {
        const auto seed = static_cast<uint64_t>(s);
        // The same underlying normals for every variant of a seed: stacks differ only in gain and norm.
        Init init{Rng(seed, stream::init), DType::f32};
        Init inputs{Rng(seed, stream::data), DType::f32};
        Init upstream{Rng(seed, stream::check), DType::f32};
        std::vector<Tensor> xs{inputs.normal({n, d}, 1.0)}, ws;
        xs[0].requires_grad_(true);
        for (int64_t l = 0; l < L; ++l) {
          ws.push_back(init.normal({d, d}, gain / std::sqrt(static_cast<double>(d))));
          ws.back().requires_grad_(true);
          Tensor h = linear(xs.back(), ws.back());
          if (!linear_act) h = gelu(h);
          if (ln) h = layernorm(h, gamma, beta);
          h.retain_grad();
          xs.push_back(h);
        }
        xs.back().backward(upstream.normal({n, d}, 1.0 / static_cast<double>(n)));
        for (int64_t l = 0; l <= L; ++l) act[static_cast<size_t>(l)].push_back(mean_token_norm(xs[static_cast<size_t>(l)]));
        for (int64_t l = 0; l < L; ++l) {
          wg[static_cast<size_t>(l)].push_back(frobenius(ws[static_cast<size_t>(l)].grad()));
          xg[static_cast<size_t>(l)].push_back(frobenius(xs[static_cast<size_t>(l)].grad()));
        }
        last_over_input.push_back(ratio(act.back().back(), act.front().back()));
      }
      StackProbe sp;
      sp.gain = gain;
      sp.layernorm = ln != 0;
      sp.label = fmt::format("{} gain={}", ln ? "layernorm" : "plain", gain);
      for (const auto& v : act) sp.act_norm.push_back(summarize(v));
      for (const auto& v : wg) sp.weight_grad_norm.push_back(summarize(v));
      for (const auto& v : xg) sp.input_grad_norm.push_back(summarize(v));
      sp.last_over_input = summarize(last_over_input);
      sp.expected_last_over_input = ln ? 1.0 : linear_act ? std::pow(gain, static_cast<double>(L)) : kNaN;
      if (ln) {
        for (int64_t l = 1; l <= L; ++l)
          res.layernorm_max_rel_dev = std::max(res.layernorm_max_rel_dev,
                                               std::abs(sp.act_norm[static_cast<size_t>(l)].mean / res.sqrt_d - 1.0));
      }
      res.stacks.push_back(std::move(sp));
    }
  }
  return res;
}

// ---- preset 2: Pre-LN growth ---------------------------------------------------------------

namespace {
TrainConfig preset_base() {
  TrainConfig c;
  c.model.model = ModelKind::gpt;
  c.model.norm = NormKind::layernorm;
  return c;
}
}  // namespace

PrelnGrowthResult probe_preln_growth(const ProbeOptions& opt, int64_t layers) {
  PrelnGrowthResult res;
  for (InitScheme init : {InitScheme::gpt2, InitScheme::xavier}) {
    TrainConfig c = preset_base();
    c.model.placement = Placement::pre;
    c.model.layers = layers;
    c.model.init = init;
    res.runs.push_back(probe_config(c, opt));
  }
  return res;
}

// ---- preset 3: Xiong et al. 2020 -------------------------------------------------------------

XiongResult probe_xiong(const ProbeOptions& opt, const std::vector<int64_t>& depths) {
  NL_USAGE(!depths.empty(), "--depths needs at least one depth");
  XiongResult res;
  res.depths = depths;
  std::sort(res.depths.begin(), res.depths.end());
  res.depths.erase(std::unique(res.depths.begin(), res.depths.end()), res.depths.end());
  for (int64_t L : res.depths) {
    NL_USAGE(L >= 2, "--depths: each depth must be >= 2 (a first and a last layer), got {}", L);
    for (Placement pl : {Placement::post, Placement::pre}) {
      TrainConfig c = preset_base();
      c.model.init = InitScheme::xavier;
      c.model.placement = pl;
      c.model.layers = L;
      XiongRun run;
      run.placement = pl;
      run.layers = L;
      run.probe = probe_config(c, opt);
      res.runs.push_back(std::move(run));
    }
  }
  // The claims, against the fc2 (W^{2,l}) gradient ratios, one pair of runs per depth.
  res.post_grows = res.pre_flat = res.post_above_pre = true;
  for (size_t i = 0; i + 1 < res.runs.size(); i += 2) {
    const double post = res.runs[i].probe.fc2_last_over_first.mean;
    const double pre = res.runs[i + 1].probe.fc2_last_over_first.mean;
    res.post_grows = res.post_grows && post > 2.0;
    res.pre_flat = res.pre_flat && pre >= 0.5 && pre <= 2.0;
    res.post_above_pre = res.post_above_pre && post > pre;
  }
  const auto last_fc2 = [](const XiongRun& r) { return r.probe.layers.back().fc2_grad_norm.mean; };
  const XiongRun &post_min = res.runs.front(), &pre_min = res.runs[1];
  const XiongRun &post_max = res.runs[res.runs.size() - 2], &pre_max = res.runs.back();
  res.post_last_depth_ratio = ratio(last_fc2(post_max), last_fc2(post_min));
  res.pre_last_depth_ratio = ratio(last_fc2(pre_max), last_fc2(pre_min));
  res.pre_predicted_depth_ratio =
      std::sqrt(static_cast<double>(res.depths.front()) / static_cast<double>(res.depths.back()));

  std::string v = fmt::format(
      "Xiong et al. 2020 (Fig. 3): at init, ||dL/dW^(2,l)|| grows with the layer index l for Post-LN and is "
      "roughly flat for Pre-LN. Measured (fc2 weight, last layer / first layer, mean over seeds): Post-LN {} at "
      "every depth (threshold: > 2), Pre-LN {} (threshold: within [0.5, 2]), Post-LN's ratio {} Pre-LN's at every "
      "depth. ",
      res.post_grows ? "grows" : "does NOT grow", res.pre_flat ? "is roughly flat" : "is NOT roughly flat",
      res.post_above_pre ? "exceeds" : "does NOT exceed");
  const bool held = res.post_grows && res.pre_flat && res.post_above_pre;
  v += held ? "The claim holds in this measurement." : "The claim does not fully hold in this measurement.";
  if (res.depths.size() > 1) {
    v += fmt::format(
        " Theorem 1 (last layer, L = {} vs L = {}): Post-LN ratio {:.3g} (predicted ~1, depth-independent); "
        "Pre-LN ratio {:.3g} (predicted sqrt({}/{}) = {:.3g}).",
        res.depths.back(), res.depths.front(), res.post_last_depth_ratio, res.pre_last_depth_ratio,
        res.depths.front(), res.depths.back(), res.pre_predicted_depth_ratio);
  }
  res.verdict = v;
  return res;
}

XiongFactors probe_xiong_factors(const ProbeOptions& opt, const std::vector<InitScheme>& inits,
                                 const std::vector<int64_t>& widths, const std::vector<int64_t>& depths) {
  NL_USAGE(!inits.empty() && !widths.empty() && !depths.empty(), "--inits, --widths and --depths need a value each");
  XiongFactors res;
  for (InitScheme init : inits)
    for (int64_t d : widths) {
      NL_USAGE(d >= 16 && d % 16 == 0 && d <= 1024, "--widths: {} is not a multiple of 16 in [16, 1024]", d);
      for (int64_t L : depths) {
        NL_USAGE(L >= 2 && L <= 48, "--depths: each depth must be in [2, 48], got {}", L);
        XiongFactorRow row;
        row.init = init;
        row.d_model = d;
        row.layers = L;
        for (Placement pl : {Placement::post, Placement::pre}) {
          TrainConfig c = preset_base();
          c.model.init = init;
          c.model.placement = pl;
          c.model.layers = L;
          c.model.d_model = d;
          c.model.d_hidden = 2 * d;
          c.model.heads = d / 16;
          (pl == Placement::post ? row.post : row.pre) = probe_config(c, opt).fc2_last_over_first;
        }
        res.rows.push_back(row);
      }
    }
  // Each factor's effect: the range of the per-row means when only that factor varies, averaged
  // over the settings of the others.
  auto spread = [&](auto key_of_others, bool post) {
    std::map<std::string, std::pair<double, double>> groups;
    for (const XiongFactorRow& r : res.rows) {
      const double v = post ? r.post.mean : r.pre.mean;
      auto [it, fresh] = groups.try_emplace(key_of_others(r), v, v);
      if (!fresh) it->second = {std::min(it->second.first, v), std::max(it->second.second, v)};
    }
    double total = 0;
    for (auto& [k, mm] : groups) total += mm.second - mm.first;
    return groups.empty() ? 0.0 : total / double(groups.size());
  };
  auto key = [](const XiongFactorRow& r, int skip) {
    return fmt::format("{}/{}/{}", skip == 0 ? "" : to_string(r.init), skip == 1 ? 0 : r.d_model, skip == 2 ? 0 : r.layers);
  };
  const char* names[3] = {"init scheme (with its embedding scale and head init)", "model width", "depth"};
  std::string sum = "Mean spread of the fc2 last/first ratio when one factor varies and the others are fixed:";
  for (int f = 0; f < 3; ++f)
    sum += fmt::format(" {}: Post-LN {:.3g}, Pre-LN {:.3g};", names[f], spread([&](const XiongFactorRow& r) { return key(r, f); }, true),
                       spread([&](const XiongFactorRow& r) { return key(r, f); }, false));
  double post_max = 0;
  const XiongFactorRow* grows = nullptr;
  for (const XiongFactorRow& r : res.rows)
    if (r.post.mean > post_max) post_max = r.post.mean, grows = &r;
  if (grows)
    sum += fmt::format(" The largest Post-LN ratio, {:.3g}, is at init {}, d = {}, L = {} ({}).", post_max,
                       to_string(grows->init), grows->d_model, grows->layers,
                       post_max > 2 ? "growth toward the output as in Fig. 3" : "no setting reaches Fig. 3's growth (> 2)");
  res.summary = sum;
  return res;
}

// ---- preset 4: identity share ----------------------------------------------------------------

IdentityShareResult probe_identity_share(const ProbeOptions& opt, int64_t layers) {
  IdentityShareResult res;
  for (Placement pl : {Placement::pre, Placement::post}) {
    for (bool residual : {true, false}) {
      TrainConfig c = preset_base();
      c.model.init = InitScheme::xavier;
      c.model.placement = pl;
      c.model.layers = layers;
      c.model.residual = residual;
      res.runs.push_back(probe_config(c, opt));
    }
  }
  return res;
}

// ---- JSON ----------------------------------------------------------------------------------

namespace {

using nlohmann::json;

constexpr auto num = json_number<json>;
json stat(const Stat& s) { return json{{"mean", num(s.mean)}, {"std", num(s.std)}}; }
template <class T>
json stats(const std::vector<T>& v) {
  json a = json::array();
  for (const Stat& s : v) a.push_back(stat(s));
  return a;
}

json model_json(const TrainConfig& c) {
  const ModelConfig& m = c.model;
  return json{{"model", to_string(m.model)},       {"norm", to_string(m.norm)},
              {"placement", to_string(m.placement)}, {"final_norm", to_string(m.final_norm)},
              {"qk_norm", m.qk_norm},   {"residual", m.residual},
              {"layers", m.layers},     {"d_model", m.d_model},
              {"d_hidden", m.d_hidden}, {"heads", m.heads},
              {"vocab", m.vocab},       {"seq_len", m.seq_len},
              {"init", to_string(m.init)},         {"norm_eps", m.eps()},
              {"data", c.data.str()},         {"seed", c.seed}};
}

// model_json with the variants' keys that are set (as config.json holds them).
json model_json_with_variants(const TrainConfig& c) {
  json j = model_json(c);
  const ModelConfig& m = c.model;
  if (m.residual_scale) j["residual_scale"] = to_string(*m.residual_scale);
  if (m.residual_scale_kind() == ResidualScale::layerscale) j["layerscale_init"] = m.layerscale_value();
  if (m.placement == Placement::mixln) j["mix_post_layers"] = m.mix_post();
  if (m.ln_scaling) j["ln_scaling"] = *m.ln_scaling;
  if (m.norm == NormKind::dyt || m.norm == NormKind::derf) j["dyt_alpha"] = m.dyt_alpha_init();
  if (m.gemma_norm) j["gemma_norm"] = *m.gemma_norm;
  if (m.embed_norm) j["embed_norm"] = *m.embed_norm;
  return j;
}

json config_probe_json(const ConfigProbe& p) {
  json layers = json::array();
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerProbe& lp = p.layers[l];
    layers.push_back(json{{"layer", l + 1},
                          {"act_norm", stat(lp.act_norm)},
                          {"growth", stat(lp.growth)},
                          {"stream_grad_norm", stat(lp.stream_grad_norm)},
                          {"input_grad_norm", stat(lp.input_grad_norm)},
                          {"block_grad_norm", stat(lp.block_grad_norm)},
                          {"fc2_grad_norm", stat(lp.fc2_grad_norm)},
                          {"identity_norm", stat(lp.identity_norm)},
                          {"f_norm", stat(lp.f_norm)},
                          {"identity_share", stat(lp.identity_share)},
                          {"cosine", stat(lp.cosine)}});
  }
  return json{{"label", p.label},
              {"config", model_json_with_variants(p.config)},
              {"sqrt_d", p.sqrt_d},
              {"final_norm_on", p.final_norm_on},
              {"loss", stat(p.loss)},
              {"embed_norm", stat(p.embed_norm)},
              {"embed_grad_norm", stat(p.embed_grad_norm)},
              {"layers", layers},
              {"final_norm",
               {{"in_norm", stat(p.final_in_norm)},
                {"out_norm", stat(p.final_out_norm)},
                {"in_grad_norm", stat(p.final_in_grad_norm)},
                {"out_grad_norm", stat(p.final_out_grad_norm)}}},
              {"fc2_last_over_first", stat(p.fc2_last_over_first)},
              {"block_last_over_first", stat(p.block_last_over_first)},
              {"stream_last_over_embed", stat(p.stream_last_over_embed)}};
}

json plain_stack_json(const PlainStackResult& r) {
  json stacks = json::array();
  for (const StackProbe& s : r.stacks) {
    stacks.push_back(json{{"label", s.label},
                          {"gain", s.gain},
                          {"layernorm", s.layernorm},
                          {"act_norm", stats(s.act_norm)},
                          {"weight_grad_norm", stats(s.weight_grad_norm)},
                          {"input_grad_norm", stats(s.input_grad_norm)},
                          {"last_over_input", stat(s.last_over_input)},
                          {"expected_last_over_input", num(s.expected_last_over_input)}});
  }
  return json{{"layers", r.options.layers},
              {"d", r.options.d},
              {"tokens", r.tokens},
              {"activation", to_string(r.options.activation)},
              {"weight_std", "gain / sqrt(d)"},
              {"sqrt_d", r.sqrt_d},
              {"layernorm_max_rel_dev", r.layernorm_max_rel_dev},
              {"stacks", stacks}};
}

json runs_json(const std::vector<ConfigProbe>& runs) {
  json a = json::array();
  for (const ConfigProbe& p : runs) a.push_back(config_probe_json(p));
  return a;
}

json xiong_json(const XiongResult& r) {
  json runs = json::array();
  for (const XiongRun& x : r.runs) {
    json j = config_probe_json(x.probe);
    j["placement"] = to_string(x.placement);
    runs.push_back(j);
  }
  return json{{"depths", r.depths},
              {"runs", runs},
              {"post_grows", r.post_grows},
              {"pre_flat", r.pre_flat},
              {"post_above_pre", r.post_above_pre},
              {"claim_holds", r.post_grows && r.pre_flat && r.post_above_pre},
              {"post_last_depth_ratio", num(r.post_last_depth_ratio)},
              {"pre_last_depth_ratio", num(r.pre_last_depth_ratio)},
              {"pre_predicted_depth_ratio", num(r.pre_predicted_depth_ratio)},
              {"verdict", r.verdict}};
}

}  // namespace

std::string probe_report_json(const ProbeReport& r) {
  json j{{"command", "probe"}, {"preset", r.preset}, {"seeds", r.options.seeds}, {"batch", r.options.batch}};
  if (r.plain_stack) j["plain_stack"] = plain_stack_json(*r.plain_stack);
  if (r.preln_growth) j["preln_growth"] = json{{"runs", runs_json(r.preln_growth->runs)}};
  if (r.xiong) j["xiong2020"] = xiong_json(*r.xiong);
  if (r.xiong_encdec) j["xiong2020_encdec"] = xiong_encdec_json(*r.xiong_encdec);
  if (r.identity_share) j["identity_share"] = json{{"runs", runs_json(r.identity_share->runs)}};
  if (r.config) j["config"] = config_probe_json(*r.config);
  if (r.xiong_factors) {
    json rows = json::array();
    for (const XiongFactorRow& x : r.xiong_factors->rows)
      rows.push_back({{"init", to_string(x.init)}, {"d_model", x.d_model}, {"layers", x.layers},
                      {"post_fc2_last_over_first", stat(x.post)}, {"pre_fc2_last_over_first", stat(x.pre)}});
    j["xiong2020_factors"] = {{"rows", rows}, {"summary", r.xiong_factors->summary}};
  }
  if (r.batchnorm) {
    const BatchNormProbeResult& b = *r.batchnorm;
    json dep = json::array(), gaps = json::array();
    for (const BatchDependence& d : b.dependence)
      dep.push_back({{"batch", d.batch}, {"bn_companions", stat(d.bn_companions)}, {"bn_alone", stat(d.bn_alone)},
                     {"layernorm_companions", stat(d.ln_companions)}, {"rmsnorm_companions", stat(d.rms_companions)}});
    for (const RunningGap& g : b.train_vs_eval) gaps.push_back({{"batches", g.batches}, {"gap", stat(g.gap)}});
    j["batchnorm"] = {{"d", b.d}, {"seq_len", b.seq_len}, {"batch", b.batch},
                      {"padding", {{"pad_fraction", stat(b.pad_fraction)}, {"mean_shift", stat(b.pad_mean_shift)},
                                   {"var_ratio", stat(b.pad_var_ratio)}, {"output_change", stat(b.pad_output_change)}}},
                      {"batch_dependence", dep},
                      {"train_vs_inference", gaps},
                      {"causal_leakage", {{"batchnorm", stat(b.bn_leak)}, {"layernorm", stat(b.ln_leak)},
                                          {"rmsnorm", stat(b.rms_leak)}}}};
  }
  return j.dump(2);
}

}  // namespace normlab
