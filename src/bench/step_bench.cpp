// `bench step`: whole training steps of the toy and GPT models, LayerNorm against RMSNorm.
//
//   normlab bench step                         toy and gpt, 20 layers, d 64, 32 x 16 tokens
//   normlab bench step --model gpt --d-model 256 --threads 1
//
// A step is the trainer's (src/train/trainer.cpp) without the data generation: zero_grad, the
// loss forward, backward, the gradient norm, AdamW over the one flat parameter buffer. The two
// models (same sizes, same seed, only the norm differs) take steps in turn, so that drift of
// the machine hits both alike.
//
// The norms' share of a step: the norm kernels the cpu backend calls are timed separately at
// the step's shapes, as many calls as a step makes (forward of every norm in order, then every
// backward in reverse), on as many distinct buffers as the step's norms use, so that they meet
// the caches about as they do inside the step. The share is that time over the step's time.
//
// The distance to the physical limit: the step's matrix products count step_matmul_flops()
// floating-point operations; over the step's time that is its GFLOP/s, set against the FMA
// peak measured at the same thread count before the steps (fma_peak.cpp).
#include <algorithm>
#include <array>
#include <chrono>
#include <memory>

#include "normlab/cpu_backend.h"
#include "normlab/cpu_kernels.h"
#include "normlab/adam_kernels.h"
#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/bench.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/error.h"
#include "normlab/nn.h"
#include "normlab/ops.h"
#include "normlab/system.h"
#include "normlab/train.h"
#include "bench_internal.h"

namespace normlab::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Times run(0) .. run(n-1) in turn (so that all see the same machine) until each has at least
// `repeats` samples and `min_time` seconds; returns the samples of each, in seconds.
template <class Run>
std::vector<std::vector<double>> time_in_turn(size_t n, Run&& run, int64_t repeats, double min_time) {
  std::vector<std::vector<double>> samples(n);
  std::vector<double> total(n, 0.0);
  bool more = true;
  while (more) {
    more = false;
    for (size_t k = 0; k < n; ++k) {
      const auto t0 = Clock::now();
      run(k);
      const double s = seconds_since(t0);
      samples[k].push_back(s);
      total[k] += s;
      more = more || static_cast<int64_t>(samples[k].size()) < repeats || total[k] < min_time;
    }
  }
  return samples;
}

// One model with its optimizer state and a few batches to cycle through.
struct Trainee {
  std::unique_ptr<Model> model;
  Tensor flat, flat_grad, m, v;
  Backend* kb = nullptr;
  AdamParams hp;
  std::vector<Batch> batches;
  size_t next = 0;
  Precision precision = Precision::fp32;  // what its steps store in

  Trainee(const ModelConfig& cfg, int64_t batch, uint64_t seed, Precision p) : precision(p) {
    model = std::make_unique<Model>(cfg, seed);
    ParamList& params = model->params();
    params.flatten();
    flat = params.flat();
    flat_grad = params.flat_grad();
    kb = &backend_for(flat.device(), flat.dtype());
    m = Tensor::zeros(flat.shape(), flat.dtype());
    v = Tensor::zeros(flat.shape(), flat.dtype());
    hp.lr = 1e-3;
    hp.decoupled = true;
    hp.step = 0;  // step() counts from 1
    std::unique_ptr<DataSource> data = make_synthetic({cfg.vocab, 4, 0.1, seed});
    Rng rng(seed, stream::data);
    for (int i = 0; i < 4; ++i) batches.push_back(data->train_batch(rng, batch, cfg.seq_len));
  }

  // The trainer's step (trainer.cpp), data generation aside, every op storing in `precision`.
  void step() {
    const StoragePrecisionScope storage(precision);
    ParamList& params = model->params();
    params.zero_grad();
    const Batch& b = batches[next++ % batches.size()];
    Tensor loss = model->loss(b.inputs, b.targets);
    NL_CHECK(std::isfinite(loss.item()), "bench step: the loss is not finite");
    loss.backward();
    params.fill_missing_grads();
    (void)sum_squares(*kb, flat_grad);  // the trainer's gradient norm (divergence check)
    hp.step += 1;
    run_kernel(*kb, AdamStep{flat, flat_grad, m, v, hp});
  }
};

// The norm kernels of one step through the cpu backend: `calls` norms over (rows x d), each its
// op case's forward and backward on their own tensors (normlab/opcases.h), the forwards in order
// and then the backwards in reverse, as in a step.
class NormSweep {
 public:
  NormSweep(NormKind norm, int64_t calls, int64_t rows, int64_t d, uint64_t seed)
      : b_(backend("cpu")),
        fwd_(made(norm, "fwd", rows, d, seed)),
        bwd_(made(norm, "bwd", rows, d, seed)),
        fwd_sets_(fwd_, b_, calls),
        bwd_sets_(bwd_, b_, calls),
        calls_(calls) {}

  // Both passes checked against the reference (check_case), then one sweep so every buffer holds
  // its values.
  VerifyResult verify() {
    VerifyResult r;
    r.pass = true;
    for (const opcases::OpCase* c : {&fwd_, &bwd_}) {
      const opcases::CaseCheck check = opcases::check_case(*c, b_);
      if (!check.pass) {
        r.pass = false;
        r.report += c->line() + check.report;
      }
      for (const opcases::OutputCheck& o : check.outputs)
        if (o.max_abs_err >= r.max_abs_err) r.max_abs_err = o.max_abs_err, r.worst_output = o.name;
    }
    if (r.pass) run();
    return r;
  }

  void run() {
    for (int64_t c = 0; c < calls_; ++c) fwd_sets_.call(b_, c);
    for (int64_t c = calls_ - 1; c >= 0; --c) bwd_sets_.call(b_, c);
  }

 private:
  static const opcases::OpCase& made(NormKind norm, const char* pass, int64_t rows, int64_t d, uint64_t seed) {
    return opcases::find_case(fmt::format("{}_{} rows={} d={} seed={}", to_string(norm), pass, rows, d, seed));
  }
  Backend& b_;
  const opcases::OpCase& fwd_;
  const opcases::OpCase& bwd_;
  detail::CaseSets fwd_sets_, bwd_sets_;
  int64_t calls_;
};

// Norm forwards per step: the blocks' norms that exist, plus the final norm.
int64_t norm_calls_of(const Model& model) {
  int64_t calls = 0;
  for (const Block& b : model.blocks())
    for (const Norm* n : {&b.norm1, &b.norm2, &b.norm1b, &b.norm2b}) calls += n->kind != NormKind::none ? 1 : 0;
  if (model.config().final_norm_on()) ++calls;
  return calls;
}

int64_t norm_parameters_of(Model& model) {
  int64_t n = 0;
  for (const Tensor& p : model.params().all())
    if (p.name().find("norm") != std::string::npos) n += p.numel();
  return n;
}

}  // namespace

double step_matmul_flops(const std::string& model, int64_t layers, int64_t d_model, int64_t d_hidden, int64_t vocab,
                         int64_t batch, int64_t seq) {
  const bool gpt = parse_kind<ModelKind>(model) == ModelKind::gpt;
  const double m = static_cast<double>(batch) * static_cast<double>(seq), d = static_cast<double>(d_model),
               h = static_cast<double>(d_hidden);
  // A forward product and its two backward ones: 3 x 2MNK.
  auto products = [](double mnk) { return 3 * 2 * mnk; };
  const double linears = products(m * ((gpt ? 4 : 1) * d * d + 2 * d * h));
  return static_cast<double>(layers) * linears + step_attention_flops(model, layers, d_model, batch, seq) +
         products(m * d * static_cast<double>(vocab));
}

double step_attention_flops(const std::string& model, int64_t layers, int64_t d_model, int64_t batch, int64_t seq) {
  if (parse_kind<ModelKind>(model) != ModelKind::gpt) return 0.0;
  const double t = static_cast<double>(seq);
  // Q K^T and P V, each with its two backward products: 2 x 3 x 2 (batch T T d).
  return static_cast<double>(layers) * 2 * 3 * 2 * static_cast<double>(batch) * t * t * static_cast<double>(d_model);
}


// Roughly the bytes the run holds at its peak: every model's parameters with their gradients and
// Adam's two moments (two norms' models per precision, all alive), and one step's activations the
// tape keeps, layers x tokens x (a dozen d-sized tensors + the hidden ones), plus the
// embedding and head (vocab x d) and the logits with their softmax and gradient (tokens x vocab).
namespace {

double step_bench_memory_bytes(const StepOptions& opt) {
  const double tokens = static_cast<double>(opt.batch) * static_cast<double>(opt.seq);
  const double params = static_cast<double>(opt.layers) *
                            (4.0 * opt.d_model * opt.d_model + 2.0 * opt.d_model * opt.d_hidden) +
                        2.0 * static_cast<double>(opt.vocab) * opt.d_model;
  const double acts = static_cast<double>(opt.layers) * tokens * (12.0 * opt.d_model + 3.0 * opt.d_hidden) +
                      3.0 * tokens * static_cast<double>(opt.vocab);
  const double models = 2.0 * static_cast<double>(std::max<size_t>(opt.precisions.size(), 1));
  return 4.0 * (4 * params * models + 2 * acts);
}

// The model of a `bench step` row.
ModelConfig step_model_config(const StepOptions& opt, const std::string& model_name, NormKind norm) {
  ModelConfig cfg;
  cfg.model = parse_kind<ModelKind>(model_name);
  cfg.norm = norm;
  cfg.layers = opt.layers;
  cfg.d_model = opt.d_model;
  cfg.d_hidden = opt.d_hidden;
  cfg.heads = opt.heads;
  cfg.vocab = opt.vocab;
  cfg.seq_len = opt.seq;
  return cfg;
}

// A row's sizes and counts, before it is timed.
StepRow step_row(const StepOptions& opt, const std::string& model_name, NormKind norm, int threads, Precision precision,
                 Model& model) {
  StepRow r;
  r.model = model_name;
  r.norm = to_string(norm);
  r.threads = threads;
  r.precision = precision;
  r.layers = opt.layers;
  r.d_model = opt.d_model;
  r.d_hidden = opt.d_hidden;
  r.heads = model_name == "gpt" ? opt.heads : 0;
  r.vocab = opt.vocab;
  r.batch = opt.batch;
  r.seq = opt.seq;
  r.parameters = model.params().count();
  r.norm_parameters = norm_parameters_of(model);
  r.norm_calls = norm_calls_of(model);
  r.norm_rows = opt.batch * opt.seq;
  r.matmul_flops = step_matmul_flops(model_name, opt.layers, opt.d_model, opt.d_hidden, opt.vocab, opt.batch, opt.seq);
  return r;
}

// The rows of one model at one thread count: LayerNorm's and RMSNorm's model in each precision,
// checked, then all their steps timed in turn (so that each ratio between them is of one
// machine), the two norms' kernels timed apart, each model's steps taken apart in parts; the rows
// appended to the report, precision by precision.
void time_rows(const StepOptions& opt, const std::string& model_name, int t, StepReport& report) {
  const NormKind kinds[2] = {NormKind::layernorm, NormKind::rmsnorm};
  std::vector<std::unique_ptr<Trainee>> trainees;
  std::vector<StepRow> rows;
  for (Precision precision : opt.precisions)
    for (NormKind kind : kinds) {
      trainees.push_back(
          std::make_unique<Trainee>(step_model_config(opt, model_name, kind), opt.batch, opt.seed, precision));
      rows.push_back(step_row(opt, model_name, kind, t, precision, *trainees.back()->model));
    }
  std::unique_ptr<NormSweep> sweep[2];
  VerifyResult verified[2];
  for (int k = 0; k < 2; ++k) {
    const StepRow& r = rows[static_cast<size_t>(k)];
    sweep[k] = std::make_unique<NormSweep>(kinds[k], r.norm_calls, r.norm_rows, opt.d_model, opt.seed);
    verified[k] = sweep[k]->verify();
    NL_CHECK(verified[k].pass, "bench step: the cpu backend's {} kernels fail the reference check: {}", r.norm,
             verified[k].report);
  }
  if (opt.log)
    opt.log(fmt::format("step {} threads {}: {} parameters (layernorm), {} norm calls per step", model_name, t,
                        rows[0].parameters, rows[0].norm_calls));

  for (int64_t w = 0; w < opt.warmup; ++w)
    for (auto& trainee : trainees) trainee->step();
  const auto step_s = time_in_turn(trainees.size(), [&](size_t i) { trainees[i]->step(); }, opt.repeats, opt.min_time);
  // The norm kernels at the step's shapes, in turn; a quarter of the min-time suffices (the
  // sweeps are short and steady).
  for (int k = 0; k < 2; ++k) sweep[k]->run();
  const auto norm_s = time_in_turn(2, [&](size_t k) { sweep[k]->run(); }, opt.repeats, opt.min_time / 4);
  for (size_t i = 0; i < trainees.size(); ++i) {
    // Where the time goes: as many steps again, each kernel timed.
    detail::measure_step_parts([&] { trainees[i]->step(); }, static_cast<int64_t>(step_s[i].size()), rows[i]);
    rows[i].step = summarize(step_s[i]);
    rows[i].norm_kernels = summarize(norm_s[i % 2]);
    rows[i].norm_verify = verified[i % 2];
    if (opt.log)
      opt.log(fmt::format("{}: step {:.3f} ms, norms {:.3f} ms", rows[i].name(), rows[i].step.median * 1e3,
                          rows[i].norm_kernels.median * 1e3));
    report.rows.push_back(rows[i]);
  }
}

}  // namespace

void validate(const StepOptions& opt) {
  NL_USAGE(!opt.models.empty(), "--model: no model given");
  for (const std::string& m : opt.models)
    NL_USAGE(parse_kind<ModelKind>(m) != ModelKind::encdec,
             "--model encdec: bench step times the decoder-only models (toy, gpt); an encoder-decoder's step time is "
             "train's ms/step");
  for (int t : opt.threads) NL_USAGE(t >= 1, "--threads: {} is not a thread count", t);
  NL_USAGE(opt.layers >= 1, "--layers must be >= 1, got {}", opt.layers);
  NL_USAGE(opt.d_model >= 1, "--d-model must be >= 1, got {}", opt.d_model);
  NL_USAGE(opt.d_hidden >= 1, "--d-hidden must be >= 1, got {}", opt.d_hidden);
  NL_USAGE(opt.heads >= 1, "--heads must be >= 1, got {}", opt.heads);
  NL_USAGE(opt.vocab >= 6, "--vocab must be >= 6 (4 topic markers + 2 tokens), got {}", opt.vocab);
  NL_USAGE(opt.vocab <= (int64_t{1} << 24), "--vocab must be at most {} (as train's vocab), got {}", int64_t{1} << 24,
           opt.vocab);
  NL_USAGE(!opt.precisions.empty(), "--precision: no precision given");
  for (size_t i = 0; i < opt.precisions.size(); ++i) {
    const Precision p = opt.precisions[i];
    NL_USAGE(p != Precision::fp16,
             "--precision fp16: an fp16 step needs loss scaling, which bench step does not time; it times fp32 and bf16");
    NL_USAGE(std::find(opt.precisions.begin(), opt.precisions.begin() + static_cast<std::ptrdiff_t>(i), p) ==
                 opt.precisions.begin() + static_cast<std::ptrdiff_t>(i),
             "--precision: {} is given twice", to_string(p));
  }
  NL_USAGE(opt.batch >= 1, "--batch must be >= 1, got {}", opt.batch);
  NL_USAGE(opt.seq >= 2, "--seq must be >= 2, got {}", opt.seq);
  check_timing(opt.repeats, opt.warmup, opt.min_time);
  NL_USAGE(opt.peak_time >= 0 && std::isfinite(opt.peak_time), "the FMA peak's time must be >= 0 seconds, got {}",
           opt.peak_time);
  for (const std::string& m : opt.models)
    NL_USAGE(m != "gpt" || opt.d_model % opt.heads == 0, "--d-model {} is not a multiple of --heads {}", opt.d_model,
             opt.heads);
  const std::string excess = memory_budget_excess(step_bench_memory_bytes(opt));
  NL_USAGE(excess.empty(), "the model ({} layers, d {}, hidden {}, vocab {}, {} x {} tokens) {}", opt.layers,
           opt.d_model, opt.d_hidden, opt.vocab, opt.batch, opt.seq, excess);
}

StepReport run_step_bench(const StepOptions& opt) {
  validate(opt);
  StepReport report;
  report.context = collect_context();
  std::vector<int> threads = opt.threads.empty() ? parse_threads("1,all") : opt.threads;
  auto log = [&](const std::string& s) {
    if (opt.log) opt.log(s);
  };
  bench::detail::RunFrame frame(report.context, threads);
  for (int t : threads) {
    report.context.fma_peaks.push_back(measure_fma_peak(t, opt.peak_time));
    const FmaPeak& p = report.context.fma_peaks.back();
    log(fmt::format("FMA peak, {} thread(s): {:.1f} GFLOP/s ({}, {} floats per vector)", t, p.gflop_per_s, p.isa,
                    p.lanes));
  }

  for (const std::string& model_name : opt.models) {
    for (int t : threads) {
      set_num_threads(t);
      time_rows(opt, model_name, t, report);
    }
  }
  frame.finish(report);
  if (std::find(opt.precisions.begin(), opt.precisions.end(), Precision::bf16) != opt.precisions.end() &&
      !native_bf16_products())
    report.warnings.push_back("this CPU has no bf16 dot products (or ONEDNN_MAX_CPU_ISA hides them): the bf16 rows' "
                              "products are float32 products of bf16 values (emulated)");
  std::vector<std::string> noisy;
  for (const StepRow& r : report.rows)
    if (r.step.cv() > 0.10) noisy.push_back(fmt::format("{} ({:.0f}%)", r.name(), 100 * r.step.cv()));
  if (!noisy.empty()) report.warnings.push_back(bench::detail::noisy_rows_warning(noisy, "3"));
  report.warnings.push_back(
      "the norm kernels are timed apart from the step, at its shapes, on buffers as many as the step's norms "
      "(they are cache-resident, as inside the step); see docs/bench.md");
  return report;
}

void derive(StepReport& report) {
  for (StepRow& r : report.rows) {
    if (r.runs > 1) continue;  // medians of its runs' own figures (merge_runs)
    r.norm_share = r.norm_kernels.median / r.step.median;
    r.tokens_per_s = static_cast<double>(r.batch * r.seq) / r.step.median;
    r.step_speedup = r.op_speedup = r.predicted_step_speedup = NAN;
    r.gflop_per_s = r.matmul_flops > 0 ? r.matmul_flops / r.step.median / 1e9 : NAN;
    const FmaPeak* peak = report.context.fma_peak(r.threads);
    r.fma_peak_gflop_per_s = peak ? peak->gflop_per_s : NAN;
    r.pct_of_fma_peak = 100.0 * r.gflop_per_s / r.fma_peak_gflop_per_s;
    r.outside_products_share = 1.0 - r.products_s / r.clocked_step;
    // Attention's products run inside its own kernels (the attention part): not over products_s.
    const double products_flops = r.matmul_flops - step_attention_flops(r.model, r.layers, r.d_model, r.batch, r.seq);
    r.products_gflop_per_s = products_flops > 0 ? products_flops / r.products_s / 1e9 : NAN;
    r.products_pct_of_fma_peak = 100.0 * r.products_gflop_per_s / r.fma_peak_gflop_per_s;
    if (r.precision != Precision::fp32)  // the FMA loop is float32's: no peak for bf16 dot products
      r.pct_of_fma_peak = r.products_pct_of_fma_peak = NAN;
  }
  for (StepRow& r : report.rows) {
    if (r.runs > 1) continue;
    r.precision_speedup = NAN;
    for (const StepRow& f : report.rows)
      if (r.precision != Precision::fp32 && f.precision == Precision::fp32 && f.model == r.model &&
          f.norm == r.norm && f.threads == r.threads)
        r.precision_speedup = f.step.median / r.step.median;
  }
  for (StepRow& r : report.rows) {
    if (r.norm != "rmsnorm" || r.runs > 1) continue;
    for (const StepRow& ln : report.rows) {
      if (ln.norm != "layernorm" || ln.model != r.model || ln.threads != r.threads || ln.precision != r.precision)
        continue;
      r.step_speedup = ln.step.median / r.step.median;
      r.op_speedup = ln.norm_kernels.median / r.norm_kernels.median;
      r.predicted_step_speedup = ln.step.median / (ln.step.median - ln.norm_kernels.median + r.norm_kernels.median);
    }
  }
}

}  // namespace normlab::bench
