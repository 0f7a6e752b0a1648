// `probe`'s text report: the tables a person reads, built on core's table renderer. No
// arithmetic on the results here: only how a number is written.
#include <fmt/printf.h>

#include <algorithm>
#include <cmath>

#include "normlab/probe.h"
#include "normlab/table.h"

#include "probe_internal.h"

namespace normlab {

namespace {

std::string num(double v) {
  if (std::isnan(v)) return "-";
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-2 || a >= 1e4)) return fmt::format("{:.2e}", v);
  if (a < 10) return fmt::format("{:.3f}", v);
  if (a < 100) return fmt::format("{:.2f}", v);
  return fmt::format("{:.1f}", v);
}

std::string pm(const Stat& s) {
  if (s.n <= 1 || std::isnan(s.std)) return num(s.mean);
  return num(s.mean) + " +- " + num(s.std);
}

// The fixed layout probe's tables have always had: right-aligned columns of at least `width`.
TableColumn col(const std::string& header, size_t width, const char* gap = " ") {
  return {header, Align::right, width, gap};
}

std::string seeds(int n) { return n == 1 ? "" : "s"; }

std::string model_line(const ConfigProbe& p, const ProbeOptions& opt) {
  const ModelConfig& m = p.config.model;
  return fmt::format("{}: d_model {}, d_hidden {}{}, vocab {}, final norm {}; batch {} x {} tokens of {} data; "
                     "mean over {} seed{} (from seed {})",
                     p.label, m.d_model, m.d_hidden, m.model == ModelKind::gpt ? fmt::format(", heads {}", m.heads) : "",
                     m.vocab, p.final_norm_on ? "on" : "off", opt.batch, m.seq_len, p.config.data.str(), opt.seeds,
                     seeds(opt.seeds), p.config.seed);
}

std::string final_norm_text(const ConfigProbe& p) {
  return fmt::sprintf("final norm (%s): ||x|| before %s, after %s (sqrt(d) = %s); ||dL/dx|| before %s, after %s\n",
                      p.final_norm_on ? "on" : "off", pm(p.final_in_norm), pm(p.final_out_norm), num(p.sqrt_d),
                      num(p.final_in_grad_norm.mean), num(p.final_out_grad_norm.mean));
}

// ---- presets -------------------------------------------------------------------------------------

std::string plain_stack_text(const PlainStackResult& r, const ProbeOptions& opt) {
  const PlainStackOptions& o = r.options;
  const bool gelu = o.activation == Activation::gelu;
  std::string out =
      fmt::sprintf("plain-stack: %lld layers x_l = %sW_l x_{l-1}%s (no bias), W_l ~ N(0, (gain/sqrt(d))^2), d = %lld;\n",
                   static_cast<long long>(o.layers), gelu ? "gelu(" : "", gelu ? ")" : "", static_cast<long long>(o.d));
  out += fmt::sprintf("activation: %s. The LayerNorm stack is x_l = LayerNorm(...) of the same (gamma 1, beta 0).\n",
                      o.activation == Activation::linear ? std::string("none (linear)") : std::string(to_string(o.activation)));
  out += fmt::sprintf("x_0 ~ N(0, 1), %lld tokens; mean over tokens of ||x_l|| (sqrt(d) = %s), mean over %d seed%s\n\n",
                      static_cast<long long>(r.tokens), num(r.sqrt_d), opt.seeds, seeds(opt.seeds));
  Table norms;
  norms.columns = {col("layer", 5)};
  for (const StackProbe& s : r.stacks) norms.columns.push_back(col(s.label, 18));
  for (size_t l = 0; l < r.stacks[0].act_norm.size(); ++l) {
    std::vector<std::string> row = {std::to_string(l)};
    for (const StackProbe& s : r.stacks) row.push_back(num(s.act_norm[l].mean));
    norms.add_row(row);
  }
  out += norms.text() + "\n";

  Table ends;
  ends.columns = {{"", Align::left, 22}};
  for (const StackProbe& s : r.stacks) ends.columns.push_back(col(s.label, 18));
  auto row = [&](const char* name, auto get) {
    std::vector<std::string> cells = {name};
    for (const StackProbe& s : r.stacks) cells.push_back(get(s));
    ends.add_row(cells);
  };
  row("||x_L|| / ||x_0||", [](const StackProbe& s) { return num(s.last_over_input.mean); });
  row("  std over seeds", [](const StackProbe& s) { return num(s.last_over_input.std); });
  row(o.activation == Activation::linear ? "  expected (gain^L; 1)" : "  expected (LN: 1)",
      [](const StackProbe& s) { return num(s.expected_last_over_input); });
  row("||dL/dW_1||", [](const StackProbe& s) { return num(s.weight_grad_norm.front().mean); });
  row("||dL/dW_L||", [](const StackProbe& s) { return num(s.weight_grad_norm.back().mean); });
  row("||dL/dx_0||", [](const StackProbe& s) { return num(s.input_grad_norm.front().mean); });
  out += ends.text();
  out += "\nGradients: dL/dx_L = r / N with r ~ N(0, 1) (a random linear read-out, mean over the N tokens).\n";
  out += fmt::sprintf("LayerNorm stacks: largest relative deviation from sqrt(d) over all layers, max |mean ||x_l|| / "
                      "sqrt(d) - 1| = %s\n",
                      num(r.layernorm_max_rel_dev));
  return out;
}

std::string growth_run_text(const ConfigProbe& p, const ProbeOptions& opt) {
  std::string out = model_line(p, opt) + "\n\n";
  Table t;
  t.columns = {col("layer", 6), col("||x_l||", 12), col("growth", 8), col("||dL/dx_l||", 13), col("||dL/dP_l||", 13)};
  t.add_row({"embed", num(p.embed_norm.mean), "", num(p.embed_grad_norm.mean), ""});
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerProbe& lp = p.layers[l];
    t.add_row({std::to_string(l + 1), num(lp.act_norm.mean), num(lp.growth.mean), num(lp.stream_grad_norm.mean),
               num(lp.block_grad_norm.mean)});
  }
  out += t.text() + final_norm_text(p);
  out += fmt::sprintf("stream growth over %zu layers: ||x_L|| / ||x_0|| = %s\n", p.layers.size(),
                      pm(p.stream_last_over_embed));
  return out;
}

std::string preln_growth_text(const PrelnGrowthResult& r, const ProbeOptions& opt) {
  std::string out =
      "preln-growth: the Pre-LN residual stream x_l = x_{l-1} + F(N(x_{l-1})) grows with depth (growth = "
      "||x_l|| / ||x_{l-1}||, the per-layer rate); the final norm maps it back to ~sqrt(d).\n"
      "||x|| = mean over tokens of the per-token L2 norm; gradient norms are Frobenius norms.\n\n";
  for (size_t i = 0; i < r.runs.size(); ++i) out += (i ? "\n" : "") + growth_run_text(r.runs[i], opt);
  return out;
}

std::string xiong_text(const XiongResult& r, const ProbeOptions& opt) {
  const ConfigProbe& first = r.runs.front().probe;
  std::string out = fmt::sprintf(
      "xiong2020: Xiong et al. 2020, On Layer Normalization in the Transformer Architecture, Fig. 3 / "
      "Theorem 1.\ngpt, layernorm, init xavier, d_model %lld, d_hidden %lld, heads %lld; batch %lld x %lld; "
      "mean over %d seed%s.\n",
      static_cast<long long>(first.config.model.d_model), static_cast<long long>(first.config.model.d_hidden),
      static_cast<long long>(first.config.model.heads), static_cast<long long>(opt.batch),
      static_cast<long long>(first.config.model.seq_len), opt.seeds, seeds(opt.seeds));
  out += "||dL/dW_fc2|| per layer (the second MLP weight, Xiong's W^{2,l}), Frobenius norm:\n\n";
  size_t max_layers = 0;
  for (const XiongRun& x : r.runs) max_layers = std::max(max_layers, x.probe.layers.size());
  Table per_layer;
  per_layer.columns = {col("layer", 5)};
  for (const XiongRun& x : r.runs) per_layer.columns.push_back(col(fmt::format("{} L={}", to_string(x.placement), x.layers), 11));
  for (size_t l = 0; l < max_layers; ++l) {
    std::vector<std::string> row = {std::to_string(l + 1)};
    for (const XiongRun& x : r.runs)
      row.push_back(l < x.probe.layers.size() ? num(x.probe.layers[l].fc2_grad_norm.mean) : "");
    per_layer.add_row(row);
  }
  out += per_layer.text() + "\n";
  Table ratios;
  ratios.columns = {col("depth", 5), col("placement", 9), col("fc2 last/first", 24), col("block last/first", 24),
                    col("last ||dL/dW2||", 14)};
  for (const XiongRun& x : r.runs)
    ratios.add_row({std::to_string(x.layers), to_string(x.placement), pm(x.probe.fc2_last_over_first),
                    pm(x.probe.block_last_over_first), num(x.probe.layers.back().fc2_grad_norm.mean)});
  return out + ratios.text() + "\n" + r.verdict + "\n";
}

std::string xiong_factors_text(const XiongFactors& factors, const ProbeOptions& opt) {
  std::string out = fmt::sprintf("\nxiong2020 factors: fc2 last/first per init scheme, width (d_hidden 2d, d/16 heads) "
                                 "and depth; mean +- std over %d seeds\n\n",
                                 opt.seeds);
  Table t;
  t.columns = {col("init", 8), col("d", 6), col("L", 6), col("post last/first", 20), col("pre last/first", 20)};
  for (const XiongFactorRow& x : factors.rows)
    t.add_row({to_string(x.init), std::to_string(x.d_model), std::to_string(x.layers),
               fmt::format("{:.3f} +- {:.3f}", x.post.mean, x.post.std),
               fmt::format("{:.3f} +- {:.3f}", x.pre.mean, x.pre.std)});
  return out + t.text() + "\n" + factors.summary + "\n";
}

std::string identity_share_text(const IdentityShareResult& r, const ProbeOptions& opt) {
  const ConfigProbe& first = r.runs.front();
  std::string out = fmt::sprintf(
      "identity-share: dL/dx_{l-1} = identity term + F term for block l, both exact from autograd.\n"
      "identity term: the gradient through the residual additions (and, for post, the norms) with every "
      "sublayer output held constant;\nF term: the rest. share = ||id|| / (||id|| + ||F||), cos = "
      "cos(id, F). Without the residual (\"x +\" dropped) the identity term is 0.\n"
      "gpt, layernorm, init xavier, d_model %lld, %zu layers; batch %lld x %lld; mean over %d seed%s.\n\n",
      static_cast<long long>(first.config.model.d_model), first.layers.size(), static_cast<long long>(opt.batch),
      static_cast<long long>(first.config.model.seq_len), opt.seeds, seeds(opt.seeds));
  auto name = [](const ConfigProbe& p) {
    return fmt::format("{}{}", to_string(p.config.model.placement), p.config.model.residual ? "" : " no-residual");
  };
  // The runs' names over their three columns each.
  out += fmt::sprintf("%5s", "");
  for (const ConfigProbe& p : r.runs) out += fmt::sprintf("   %-27s", name(p));
  out += "\n";
  Table t;
  t.columns = {col("layer", 5)};
  for (size_t i = 0; i < r.runs.size(); ++i)
    for (TableColumn c : {col("share", 7, " | "), col("cos", 9), col("||F||", 9)}) t.columns.push_back(c);
  for (size_t l = 0; l < first.layers.size(); ++l) {
    std::vector<std::string> row = {std::to_string(l + 1)};
    for (const ConfigProbe& p : r.runs) {
      const LayerProbe& lp = p.layers[l];
      for (const Stat* s : {&lp.identity_share, &lp.cosine, &lp.f_norm}) row.push_back(num(s->mean));
    }
    t.add_row(row);
  }
  out += t.text() + "\n||dL/dx_0||:";
  for (const ConfigProbe& p : r.runs) out += fmt::format("  {} {};", name(p), num(p.embed_grad_norm.mean));
  return out + "\n";
}

std::string config_text(const ConfigProbe& p, const ProbeOptions& opt) {
  std::string out = model_line(p, opt) + "\n";
  out += fmt::sprintf("loss at init %s; ||x|| = mean over tokens of ||x_t||; gradient norms are Frobenius norms; "
                      "share = ||id|| / (||id|| + ||F||) of dL/dx_{l-1}\n\n",
                      pm(p.loss));
  Table t;
  t.columns = {col("layer", 6),       col("||x_l||", 10),    col("growth", 8), col("||dL/dx_l||", 12),
               col("||dL/dP_l||", 12), col("||dL/dW2||", 12), col("share", 7),  col("cos", 9)};
  t.add_row({"embed", num(p.embed_norm.mean), "", num(p.embed_grad_norm.mean)});
  for (size_t l = 0; l < p.layers.size(); ++l) {
    const LayerProbe& lp = p.layers[l];
    t.add_row({std::to_string(l + 1), num(lp.act_norm.mean), num(lp.growth.mean), num(lp.stream_grad_norm.mean),
               num(lp.block_grad_norm.mean), num(lp.fc2_grad_norm.mean), num(lp.identity_share.mean),
               num(lp.cosine.mean)});
  }
  out += t.text() + final_norm_text(p);
  out += fmt::sprintf("last/first layer: ||dL/dW2|| %s, ||dL/dP|| %s; ||x_L|| / ||x_0|| = %s\n",
                      pm(p.fc2_last_over_first), pm(p.block_last_over_first), pm(p.stream_last_over_embed));
  return out;
}

std::string batchnorm_text(const BatchNormProbeResult& b, const ProbeOptions& opt) {
  auto pm = [](const Stat& s) { return fmt::format("{:.3g} +- {:.2g}", s.mean, s.std); };
  std::string out = fmt::sprintf(
      "batchnorm: BatchNorm's batch statistics vs LayerNorm's and RMSNorm's per-token ones, on token vectors\n"
      "(toy model embeddings, init torch, d = %lld, %lld tokens per sequence, batches of %lld); a change is the\n"
      "mean |y_a - y_b| over the affected tokens and channels (outputs are unit-scale); mean +- std over %d seeds.\n\n",
      static_cast<long long>(b.d), static_cast<long long>(b.seq_len), static_cast<long long>(b.batch), opt.seeds);
  out += fmt::sprintf("1. padding (lengths uniform in [4, %lld], pad token 0; %s of the positions are pads)\n",
                      static_cast<long long>(b.seq_len), pm(b.pad_fraction));
  out += fmt::sprintf("   BatchNorm per-channel mean, pads counted vs not: |shift| %s; variance ratio %s\n",
                      pm(b.pad_mean_shift), pm(b.pad_var_ratio));
  out += fmt::sprintf("   the real tokens' BatchNorm output changes by %s (LayerNorm and RMSNorm see one token at a "
                      "time: no pad enters)\n\n",
                      pm(b.pad_output_change));
  out += "2. one sequence's output when its batch-mates change\n";
  Table t;  // indented by three spaces: the first column is three wider
  t.columns = {col("batch", 9), col("BN: other companions", 24, "  "), col("BN: vs normalized alone", 24, "  "),
               col("LayerNorm", 12, "  "), col("RMSNorm", 12, "  ")};
  for (const BatchDependence& d : b.dependence)
    t.add_row({std::to_string(d.batch), pm(d.bn_companions), pm(d.bn_alone), fmt::format("{:.3g}", d.ln_companions.mean),
               fmt::format("{:.3g}", d.rms_companions.mean)});
  out += t.text();
  out += "\n3. train vs inference: BatchNorm with the batch's statistics vs the running ones (momentum 0.1)\n";
  for (const RunningGap& g : b.train_vs_eval)
    out += fmt::sprintf("   after %4lld batches: output gap %s\n", static_cast<long long>(g.batches), pm(g.gap));
  out += "\n4. causal leakage: statistics over whole sequences; one sequence's last token replaced\n";
  out += fmt::sprintf("   change of its earlier positions: BatchNorm %s, LayerNorm %.3g, RMSNorm %.3g\n", pm(b.bn_leak),
                      b.ln_leak.mean, b.rms_leak.mean);
  return out;
}

}  // namespace

std::string probe_report_text(const ProbeReport& report) {
  const ProbeOptions& opt = report.options;
  std::string out;
  auto section = [&](const std::string& text) {
    if (!out.empty()) out += "\n" + std::string(100, '-') + "\n\n";
    out += text;
  };
  if (report.config) section(config_text(*report.config, opt));
  if (report.plain_stack) section(plain_stack_text(*report.plain_stack, opt));
  if (report.preln_growth) section(preln_growth_text(*report.preln_growth, opt));
  if (report.xiong) section(xiong_text(*report.xiong, opt));
  if (report.xiong_factors) out += xiong_factors_text(*report.xiong_factors, opt);
  if (report.xiong_encdec) section(xiong_encdec_text(*report.xiong_encdec, opt));
  if (report.identity_share) section(identity_share_text(*report.identity_share, opt));
  if (report.batchnorm) section(batchnorm_text(*report.batchnorm, opt));
  return out;
}

}  // namespace normlab
