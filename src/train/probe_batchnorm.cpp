// `probe batchnorm`: BatchNorm's batch statistics against LayerNorm's and RMSNorm's per-token ones,
// measured on token vectors (see probe.h). BatchNorm is a forward-only reference computation here,
// in double: it is not a training op of normlab.
#include <cmath>
#include <vector>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/ops.h"
#include "normlab/probe.h"

namespace normlab {

namespace {

constexpr int64_t kSeq = 16, kD = 64, kVocab = 64;
constexpr double kEps = 1e-5;

// (B, T, d) token vectors as doubles, row-major; mask[b*T + t] says which positions are real.
struct Tokens {
  int64_t b = 0;
  std::vector<double> x;
  std::vector<char> mask;
};

// Embeddings of the given ids by a toy model's embedding (init torch).
Tokens embed(const Model& model, const std::vector<int32_t>& ids, int64_t b) {
  ForwardTrace trace;
  NoGradGuard no_grad;
  model.forward(Tensor::from_ids(ids, {b, kSeq}), &trace);
  return Tokens{b, trace.embed.to_vector(), std::vector<char>(size_t(b * kSeq), 1)};
}

std::vector<int32_t> random_ids(Rng& rng, int64_t b) {
  std::vector<int32_t> ids(size_t(b * kSeq));
  for (int32_t& i : ids) i = int32_t(1 + rng.below(uint32_t(kVocab - 1)));  // 0 is the pad
  return ids;
}

struct ChannelStats {
  std::vector<double> mean, var;
};

// Per channel over the positions the mask (or every position) selects.
ChannelStats batch_stats(const Tokens& t, bool masked) {
  ChannelStats s{std::vector<double>(kD, 0.0), std::vector<double>(kD, 0.0)};
  double n = 0;
  for (int64_t p = 0; p < t.b * kSeq; ++p) {
    if (masked && !t.mask[size_t(p)]) continue;
    ++n;
    for (int64_t c = 0; c < kD; ++c) s.mean[size_t(c)] += t.x[size_t(p * kD + c)];
  }
  for (double& m : s.mean) m /= n;
  for (int64_t p = 0; p < t.b * kSeq; ++p) {
    if (masked && !t.mask[size_t(p)]) continue;
    for (int64_t c = 0; c < kD; ++c) {
      const double e = t.x[size_t(p * kD + c)] - s.mean[size_t(c)];
      s.var[size_t(c)] += e * e;
    }
  }
  for (double& v : s.var) v /= n;
  return s;
}

// BatchNorm of positions [p0, p1) with the given statistics.
std::vector<double> bn_apply(const Tokens& t, const ChannelStats& s, int64_t p0, int64_t p1) {
  std::vector<double> y;
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t c = 0; c < kD; ++c)
      y.push_back((t.x[size_t(p * kD + c)] - s.mean[size_t(c)]) / std::sqrt(s.var[size_t(c)] + kEps));
  return y;
}

double mean_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(a[i] - b[i]);
  return a.empty() ? 0.0 : s / double(a.size());
}

// LayerNorm / RMSNorm (normlab's ops, gain 1, bias 0) of sequence `seq` of the batch.
std::vector<double> per_token_norm(const Tokens& t, int64_t seq, bool layernorm) {
  Tensor x = Tensor::from(t.x, {t.b * kSeq, kD});
  Tensor ones = Tensor::full({kD}, 1.0), zeros = Tensor::full({kD}, 0.0);
  NoGradGuard no_grad;
  std::vector<double> all = (layernorm ? normlab::layernorm(x, ones, zeros, kEps) : rmsnorm(x, ones, kEps)).to_vector();
  return std::vector<double>(all.begin() + seq * kSeq * kD, all.begin() + (seq + 1) * kSeq * kD);
}

// The batch of `b` sequences whose sequence 0 is `target` and the others drawn from rng.
Tokens with_companions(const Model& model, const std::vector<int32_t>& target, Rng& rng, int64_t b) {
  std::vector<int32_t> ids = random_ids(rng, b);
  std::copy(target.begin(), target.end(), ids.begin());
  return embed(model, ids, b);
}

struct SeedNumbers {
  double pad_fraction = 0, pad_mean_shift = 0, pad_var_ratio = 0, pad_output_change = 0;
  std::vector<double> bn_comp, bn_alone, ln_comp, rms_comp, gaps;
  double bn_leak = 0, ln_leak = 0, rms_leak = 0;
};

// Padding: lengths uniform in [4, 16], the rest token 0; how the batch's statistics and each real
// token's output move when the padding is counted.
void measure_padding(const Model& model, Rng& rng, int64_t batch, SeedNumbers& r) {
  std::vector<int32_t> ids = random_ids(rng, batch);
  std::vector<char> mask(ids.size(), 1);
  for (int64_t s = 0; s < batch; ++s) {
    const int64_t len = 4 + int64_t(rng.below(kSeq - 3));
    for (int64_t t = len; t < kSeq; ++t) {
      ids[size_t(s * kSeq + t)] = 0;
      mask[size_t(s * kSeq + t)] = 0;
    }
  }
  Tokens tok = embed(model, ids, batch);
  tok.mask = mask;
  const ChannelStats with = batch_stats(tok, false), without = batch_stats(tok, true);
  double shift = 0, ratio = 0, real = 0;
  for (int64_t c = 0; c < kD; ++c) {
    shift += std::abs(with.mean[size_t(c)] - without.mean[size_t(c)]);
    ratio += with.var[size_t(c)] / without.var[size_t(c)];
  }
  for (char m : mask) real += m;
  r.pad_fraction = 1.0 - real / double(mask.size());
  r.pad_mean_shift = shift / kD;
  r.pad_var_ratio = ratio / kD;
  double change = 0, count = 0;
  for (int64_t p = 0; p < batch * kSeq; ++p) {
    if (!mask[size_t(p)]) continue;
    const std::vector<double> a = bn_apply(tok, with, p, p + 1), b = bn_apply(tok, without, p, p + 1);
    change += mean_abs_diff(a, b);
    ++count;
  }
  r.pad_output_change = change / count;
}

// Batch-mates: one target sequence in batches of each size, with two sets of companions.
void measure_batch_mates(const Model& model, Rng& rng, const std::vector<int64_t>& sizes, SeedNumbers& r) {
  const std::vector<int32_t> target = random_ids(rng, 1);
  const Tokens alone = embed(model, target, 1);
  const std::vector<double> y_alone = bn_apply(alone, batch_stats(alone, false), 0, kSeq);
  for (int64_t b : sizes) {
    const Tokens a = with_companions(model, target, rng, b), c = with_companions(model, target, rng, b);
    const std::vector<double> ya = bn_apply(a, batch_stats(a, false), 0, kSeq);
    const std::vector<double> yc = bn_apply(c, batch_stats(c, false), 0, kSeq);
    r.bn_comp.push_back(mean_abs_diff(ya, yc));
    r.bn_alone.push_back(mean_abs_diff(ya, y_alone));
    r.ln_comp.push_back(mean_abs_diff(per_token_norm(a, 0, true), per_token_norm(c, 0, true)));
    r.rms_comp.push_back(mean_abs_diff(per_token_norm(a, 0, false), per_token_norm(c, 0, false)));
  }
}

// Train vs inference: running statistics as PyTorch keeps them (momentum 0.1, from mean 0 and
// variance 1; the unbiased variance goes into the running one) after each number of batches.
void measure_running_gap(const Model& model, uint64_t seed, int64_t batch, const std::vector<int64_t>& running_batches,
                         SeedNumbers& r) {
  for (int64_t n : running_batches) {
    ChannelStats running{std::vector<double>(kD, 0.0), std::vector<double>(kD, 1.0)};
    Rng train_rng(seed ^ 0x51ed27ULL, stream::data);
    for (int64_t i = 0; i < n; ++i) {
      const Tokens t = embed(model, random_ids(train_rng, batch), batch);
      const ChannelStats s = batch_stats(t, false);
      const double unbias = double(batch * kSeq) / double(batch * kSeq - 1);
      for (int64_t c = 0; c < kD; ++c) {
        running.mean[size_t(c)] = 0.9 * running.mean[size_t(c)] + 0.1 * s.mean[size_t(c)];
        running.var[size_t(c)] = 0.9 * running.var[size_t(c)] + 0.1 * s.var[size_t(c)] * unbias;
      }
    }
    Rng eval_rng(seed ^ 0xe7a1ULL, stream::data);
    const Tokens fresh = embed(model, random_ids(eval_rng, batch), batch);
    r.gaps.push_back(mean_abs_diff(bn_apply(fresh, batch_stats(fresh, false), 0, batch * kSeq),
                                   bn_apply(fresh, running, 0, batch * kSeq)));
  }
}

// Causal leakage: sequence 0's last token replaced; its earlier positions' outputs compared.
void measure_leakage(const Model& model, Rng& rng, int64_t batch, SeedNumbers& r) {
  std::vector<int32_t> ids = random_ids(rng, batch);
  std::vector<int32_t> changed = ids;
  changed[size_t(kSeq - 1)] = ids[size_t(kSeq - 1)] % (kVocab - 1) + 1;  // another token in 1..V-1
  const Tokens a = embed(model, ids, batch), c = embed(model, changed, batch);
  r.bn_leak = mean_abs_diff(bn_apply(a, batch_stats(a, false), 0, kSeq - 1),
                            bn_apply(c, batch_stats(c, false), 0, kSeq - 1));
  auto first = [](std::vector<double> v) {
    v.resize(size_t((kSeq - 1) * kD));
    return v;
  };
  r.ln_leak = mean_abs_diff(first(per_token_norm(a, 0, true)), first(per_token_norm(c, 0, true)));
  r.rms_leak = mean_abs_diff(first(per_token_norm(a, 0, false)), first(per_token_norm(c, 0, false)));
}

// The four measurements of one seed's model, drawing from one data stream in this order.
SeedNumbers one_seed(uint64_t seed, int64_t batch, const std::vector<int64_t>& sizes,
                     const std::vector<int64_t>& running_batches) {
  ModelConfig cfg;
  cfg.init = InitScheme::torch;
  cfg.layers = 1;
  cfg.d_model = kD;
  cfg.vocab = kVocab;
  cfg.seq_len = kSeq;
  const Model model(cfg, seed);
  Rng rng(seed, stream::data);
  SeedNumbers r;
  measure_padding(model, rng, batch, r);
  measure_batch_mates(model, rng, sizes, r);
  measure_running_gap(model, seed, batch, running_batches, r);
  measure_leakage(model, rng, batch, r);
  return r;
}

template <class F>
Stat over(const std::vector<SeedNumbers>& seeds, F get) {
  std::vector<double> v;
  for (const SeedNumbers& s : seeds) v.push_back(get(s));
  return summarize(v);
}

}  // namespace

BatchNormProbeResult probe_batchnorm(const ProbeOptions& opt) {
  const int64_t batch = 32;
  const std::vector<int64_t> sizes = {32, 8}, running = {1, 10, 100};
  std::vector<SeedNumbers> seeds;
  {
    ThreadCountScope threads(opt.threads);
    for (int s = 0; s < opt.seeds; ++s) seeds.push_back(one_seed(uint64_t(s), batch, sizes, running));
  }

  BatchNormProbeResult res;
  res.d = kD;
  res.seq_len = kSeq;
  res.batch = batch;
  res.pad_fraction = over(seeds, [](const SeedNumbers& s) { return s.pad_fraction; });
  res.pad_mean_shift = over(seeds, [](const SeedNumbers& s) { return s.pad_mean_shift; });
  res.pad_var_ratio = over(seeds, [](const SeedNumbers& s) { return s.pad_var_ratio; });
  res.pad_output_change = over(seeds, [](const SeedNumbers& s) { return s.pad_output_change; });
  for (size_t i = 0; i < sizes.size(); ++i) {
    BatchDependence d;
    d.batch = sizes[i];
    d.bn_companions = over(seeds, [i](const SeedNumbers& s) { return s.bn_comp[i]; });
    d.bn_alone = over(seeds, [i](const SeedNumbers& s) { return s.bn_alone[i]; });
    d.ln_companions = over(seeds, [i](const SeedNumbers& s) { return s.ln_comp[i]; });
    d.rms_companions = over(seeds, [i](const SeedNumbers& s) { return s.rms_comp[i]; });
    res.dependence.push_back(d);
  }
  for (size_t i = 0; i < running.size(); ++i)
    res.train_vs_eval.push_back({running[i], over(seeds, [i](const SeedNumbers& s) { return s.gaps[i]; })});
  res.bn_leak = over(seeds, [](const SeedNumbers& s) { return s.bn_leak; });
  res.ln_leak = over(seeds, [](const SeedNumbers& s) { return s.ln_leak; });
  res.rms_leak = over(seeds, [](const SeedNumbers& s) { return s.rms_leak; });
  return res;
}

}  // namespace normlab
