// gradcheck itself: every case passes, and a wrong backward makes it fail (the check can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "normlab/autograd.h"
#include "normlab/backend.h"
#include "normlab/elementwise_kernels.h"
#include "normlab/encdec.h"
#include "normlab/gradcheck.h"
#include "normlab/nn.h"
#include "normlab/ops.h"
#include "normlab/rng.h"
#include "gpu_skip.h"

using namespace normlab;

TEST(Gradcheck, EveryCasePassesFiniteDifferencesAndFloat32) {
  GradcheckOptions opt;
  for (const GradCase& c : gradcheck_cases()) {
    CaseResult fd = check_finite_differences(c, opt);
    EXPECT_TRUE(fd.pass) << c.name;
    for (const InputCheck& ic : fd.inputs) EXPECT_TRUE(ic.pass) << c.name << " " << ic.input << " " << ic.max_abs_err;
    CaseResult f32 = check_float32_backend(c, opt);
    for (const InputCheck& ic : f32.inputs) EXPECT_TRUE(ic.pass) << c.name << " f32 " << ic.input << " " << ic.max_abs_err;
  }
}

// The same float32 check with every kernel on the GPU (the cases' tensors moved to the device; the cuda backend's kernels for
// the cases' host tensors); skipped, saying so, where no CUDA device exists.
TEST(Gradcheck, Float32OnTheCudaBackend) {
  const std::vector<std::string> names = backend_names();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) {
    GPU_SKIP() << "the cuda backend's gradcheck is not run on this machine";
  }
  GradcheckOptions opt;
  opt.f32_backend = "cuda";
  for (const GradCase& c : gradcheck_cases()) {
    CaseResult f32 = check_float32_backend(c, opt);
    EXPECT_TRUE(f32.pass) << c.name;
    for (const InputCheck& ic : f32.inputs) EXPECT_TRUE(ic.pass) << c.name << " cuda f32 " << ic.input << " " << ic.max_abs_err;
  }
}

// Every case's float32 gradients with the CUDA kernels run by cuda-sim, the cases' tensors in its
// device memory, on
// every machine: never skipped.
TEST(Gradcheck, Float32OnCudaSim) {
  GradcheckOptions opt;
  opt.f32_backend = "cuda-sim";
  for (const GradCase& c : gradcheck_cases()) {
    CaseResult f32 = check_float32_backend(c, opt);
    EXPECT_TRUE(f32.pass) << c.name;
    for (const InputCheck& ic : f32.inputs) EXPECT_TRUE(ic.pass) << c.name << " cuda-sim f32 " << ic.input << " " << ic.max_abs_err;
  }
}

// The backend check with activations and gradients stored in bf16 and fp16, each norm_compute
// mode: every case within the format's tolerance; a backward off by 20% only in low precision
// fails in both (the check resolves errors of 16 ulps of the format: 12.5% in bf16, 1.6% in fp16).
GradCase broken_rmsnorm_case(double factor, bool low_only);
TEST(Gradcheck, EveryCasePassesInBf16AndFp16) {
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    for (NormCompute nc : {NormCompute::format, NormCompute::fused}) {
      SCOPED_TRACE(::testing::Message() << to_string(p) << " " << to_string(nc));
      GradcheckOptions opt;
      opt.precision = p;
      opt.norm_compute = nc;
      // fp16's composite overflows in torch.rsqrt's backward on rows of std ~0.02 (r^3 > 65504, as
      // in PyTorch): the model losses' first norm reads gpt2-init embeddings, so the gradients
      // before it are inf there and only there.
      int overflowed = 0;
      for (const GradCase& c : gradcheck_cases()) {
        CaseResult r = check_float32_backend(c, opt);
        EXPECT_EQ(r.check, std::string("cpu-") + to_string(p));
        const bool model = c.name.size() > 5 && c.name.substr(c.name.size() - 5) == "_loss";
        for (const InputCheck& ic : r.inputs) {
          if (model && !std::isfinite(ic.worst_analytic) && std::isfinite(ic.worst_numeric)) {
            ++overflowed;
            continue;
          }
          EXPECT_TRUE(ic.pass) << c.name << " " << ic.input << " rel " << ic.max_rel_err;
        }
      }
      EXPECT_EQ(overflowed > 0, p == Precision::fp16 && nc == NormCompute::format) << overflowed;
      EXPECT_FALSE(check_float32_backend(broken_rmsnorm_case(1.2, true), opt).pass);
      GradcheckOptions f32 = opt;
      f32.precision = Precision::fp32;
      EXPECT_TRUE(check_float32_backend(broken_rmsnorm_case(1.2, true), f32).pass);
    }
  }
}

// An op whose recorded backward is off by `factor` in one element's gradient; low_only: in every
// element, and only inside a StoragePrecisionScope of bf16 or fp16 (a bug of the low-precision
// path alone, which the float64 reference, run in fp32, does not share).
GradCase broken_rmsnorm_case(double factor, bool low_only) {
  GradCase broken;
  broken.name = "broken_rmsnorm";
  broken.kind = "op";
  broken.make = [factor, low_only](const CaseShape& s, DType dtype, uint64_t seed) {
    Rng rng(seed, stream::check);
    std::vector<double> xv(static_cast<size_t>(s.batch * s.channels)), gv(static_cast<size_t>(s.channels));
    for (double& v : xv) v = rng.normal();
    for (double& v : gv) v = 1 + 0.1 * rng.normal();
    Tensor x = Tensor::from(xv, {s.batch, s.channels}, dtype).requires_grad_(true);
    Tensor g = Tensor::from(gv, {s.channels}, dtype).requires_grad_(true);
    CaseInstance inst;
    inst.inputs = {{"x", x}, {"gamma", g}};
    inst.forward = [x, g, factor, low_only] {
      Tensor y;
      {
        NoGradGuard ng;
        y = rmsnorm(x, g);
      }
      if (grad_enabled()) {
        // The right rule, then one element perturbed: the kind of bug gradcheck exists for.
        Tensor y_ref = rmsnorm(x, g);
        Tensor out = y_ref.detach();
        record("broken_rmsnorm", out, {y_ref}, [factor, low_only](const Tensor& dy, GradOutputs& gr) {
          if (low_only) {  // every element, only where values are stored in 16 bits
            run_kernel(backend_for(dy.device(), dy.dtype()),
                       Scale{*gr[0], dy, storage_precision() == Precision::fp32 ? 1.0 : factor});
            return;
          }
          run_kernel(backend_for(dy.device(), dy.dtype()), Scale{*gr[0], dy, 1.0});
          if (dy.dtype() == DType::f64)
            gr[0]->data<double>()[0] *= factor;
          else
            gr[0]->data<float>()[0] *= static_cast<float>(factor);
        });
        return out;
      }
      return y;
    };
    return inst;
  };
  return broken;
}

// Off by 1% in one element's gradient: gradcheck must catch it.
TEST(Gradcheck, DeliberatelyBrokenBackwardFails) {
  const GradCase broken = broken_rmsnorm_case(1.01, false);
  GradcheckOptions opt;
  CaseResult r = check_finite_differences(broken, opt);
  EXPECT_FALSE(r.pass);
  bool x_failed = false;
  for (const InputCheck& ic : r.inputs) x_failed |= (ic.input == "x" && !ic.pass);
  EXPECT_TRUE(x_failed);
}

// RMSNorm scaled by 1e-5 (every gradient near 1e-5, as a deep model's smallest) with x's
// backward multiplied by `factor` in every element.
GradCase small_gradient_case(double factor) {
  GradCase c;
  c.name = "small_gradient_rmsnorm";
  c.kind = "op";
  c.make = [factor](const CaseShape& s, DType dtype, uint64_t seed) {
    CaseInstance inst = broken_rmsnorm_case(1.0, false).make(s, dtype, seed);
    const Tensor x = inst.inputs[0].second, g = inst.inputs[1].second;
    inst.forward = [x, g, factor] {
      Tensor y = rmsnorm(x, g);
      if (grad_enabled()) {
        Tensor out = y.detach();
        record("scaled_backward", out, {y}, [factor](const Tensor& dy, GradOutputs& gr) {
          run_kernel(backend_for(dy.device(), dy.dtype()), Scale{*gr[0], dy, factor});
        });
        y = out;
      }
      return scale(y, 1e-5);
    };
    return inst;
  };
  return c;
}

// Each tensor is checked at its own scale: gradients near 1e-5 off by 1e-6 of themselves fail
// (an absolute floor, or one step for every tensor, let them through), and right ones pass.
TEST(Gradcheck, TinyGradientsAreCheckedAtTheirOwnScale) {
  GradcheckOptions opt;
  const CaseResult right = check_finite_differences(small_gradient_case(1.0), opt);
  for (const InputCheck& ic : right.inputs) {
    EXPECT_TRUE(ic.pass) << ic.input << " rel " << ic.max_rel_err;
    EXPECT_LT(ic.max_rel_err, 1e-7) << ic.input;
  }
  const CaseResult wrong = check_finite_differences(small_gradient_case(1 + 1e-6), opt);
  EXPECT_FALSE(wrong.pass);
  for (const InputCheck& ic : wrong.inputs) {
    if (ic.input != "x") continue;
    EXPECT_FALSE(ic.pass) << "rel " << ic.max_rel_err;
    EXPECT_NEAR(ic.max_rel_err, 1e-6, 2e-7);
  }
}

TEST(Gradcheck, DumpIsCompleteJson) {
  GradcheckOptions opt;
  auto j = nlohmann::json::parse(gradcheck_dump_json(find_gradcheck_case("rmsnorm"), opt));
  EXPECT_EQ(j["case"], "rmsnorm");
  ASSERT_EQ(j["inputs"].size(), 2u);
  for (auto& in : j["inputs"]) {
    ASSERT_EQ(in["values"].size(), in["analytic_grad"].size());
    ASSERT_EQ(in["values"].size(), in["numeric_grad"].size());
    for (size_t i = 0; i < in["values"].size(); ++i)
      EXPECT_NEAR(in["analytic_grad"][i].get<double>(), in["numeric_grad"][i].get<double>(), 1e-6);
  }
  EXPECT_THROW(find_gradcheck_case("no_such_op"), UsageError);
  EXPECT_THROW(parse_case_shape("2x0x8"), UsageError);
  EXPECT_THROW(parse_case_shape("2x5"), UsageError);
  EXPECT_THROW(parse_case_shape("axbxc"), UsageError);
}

// With --precision the dump's backend gradients are the format's (what a PyTorch script compares
// with its own autograd at that dtype): every one on the fp16 grid, and the dump says so.
TEST(Gradcheck, DumpInLowPrecisionHoldsTheFormatsGradients) {
  GradcheckOptions opt;
  opt.precision = Precision::fp16;
  opt.norm_compute = NormCompute::format;
  auto j = nlohmann::json::parse(gradcheck_dump_json(find_gradcheck_case("layernorm"), opt));
  EXPECT_EQ(j["precision"], "fp16");
  EXPECT_EQ(j["norm_compute"], "format");
  int off_grid = 0;
  for (auto& in : j["inputs"])
    for (auto& v : in["f32_analytic_grad"]) {
      const float f = static_cast<float>(v.get<double>());
      off_grid += round_to(Precision::fp16, f) != f;
    }
  EXPECT_EQ(off_grid, 0);
}

// The dump holds everything needed to recompute a case outside normlab: the embedding's output
// is rebuilt here from its integer ids and its table alone, and the model cases carry their ids,
// targets and hyperparameters; the float32 backend's gradients sit next to the float64 ones.
TEST(Gradcheck, DumpRecomputesOutsideNormlab) {
  GradcheckOptions opt;
  auto j = nlohmann::json::parse(gradcheck_dump_json(find_gradcheck_case("embedding"), opt));
  ASSERT_EQ(j["constants"].size(), 1u);
  const auto& ids = j["constants"][0];
  EXPECT_EQ(ids["name"], "ids");
  const auto& table = j["inputs"][0];
  const int64_t d = table["shape"][1].get<int64_t>();
  const auto& out = j["output"]["values"];
  ASSERT_EQ(out.size(), ids["values"].size() * static_cast<size_t>(d));
  for (size_t t = 0; t < ids["values"].size(); ++t)
    for (int64_t c = 0; c < d; ++c)
      EXPECT_EQ(out[t * static_cast<size_t>(d) + static_cast<size_t>(c)].get<double>(),
                table["values"][static_cast<size_t>(ids["values"][t].get<int64_t>() * d + c)].get<double>());
  EXPECT_EQ(j["f32_backend"], "cpu");
  for (auto& in : j["inputs"]) {
    ASSERT_EQ(in["f32_analytic_grad"].size(), in["analytic_grad"].size());
    for (size_t i = 0; i < in["values"].size(); ++i)
      EXPECT_NEAR(in["f32_analytic_grad"][i].get<double>(), in["analytic_grad"][i].get<double>(), 1e-5);
  }

  auto m = nlohmann::json::parse(gradcheck_dump_json(find_gradcheck_case("gpt_model_loss"), opt));
  std::vector<std::string> names;
  for (auto& c : m["constants"]) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"ids", "targets"}));
  EXPECT_EQ(m["hyperparameters"]["heads"].get<double>(), 2.0);
  EXPECT_EQ(m["hyperparameters"]["model"], "gpt");
  auto att = nlohmann::json::parse(gradcheck_dump_json(find_gradcheck_case("causal_attention"), opt));
  EXPECT_EQ(att["hyperparameters"]["heads"].get<double>(), 2.0);
}

// The estimate --shape is held to against the memory budget: the gpt case's float64 activations,
// weights and attention, with their gradients.
TEST(GradcheckBudget, MemoryEstimateOfAShape) {
  normlab::CaseShape s;
  s.batch = 2;
  s.time = 3;
  s.channels = 4;
  EXPECT_DOUBLE_EQ(normlab::gradcheck_memory_bytes(s), 8.0 * 2 * (64 * 24 + 16 * 16 + 8 * 2 * 9));
  s.time = 4096;  // attention grows with T^2
  EXPECT_GT(normlab::gradcheck_memory_bytes(s), 8.0 * 2 * 8 * 2 * 4096.0 * 4096.0);
}

// A composite case records the alpha its blocks run with (--dump): the Block's own alpha, of a model
// built from the recorded hyperparameters; DeepNet's (2L)^(1/4) for deepnorm with a norm, else 1 (it
// used to be the placement alone, so a deepnorm case without a norm would have recorded DeepNet's
// alpha for blocks run at 1). An encoder-decoder case records each stack's alpha (DeepNet's
// encoder-decoder constants), which every residual connection of that stack runs with.
void expect_encdec_alphas(const GradCase& c, const CaseInstance& inst, ModelConfig cfg) {
  EncDecConfig e;
  e.model = cfg;
  e.encoder_layers = int64_t(inst.numbers.at("encoder_layers"));
  e.decoder_layers = int64_t(inst.numbers.at("decoder_layers"));
  EXPECT_EQ(inst.numbers.count("deepnorm_alpha"), 0u) << c.name << ": the decoder-only alpha does not apply";
  const double enc = inst.numbers.at("encoder_alpha"), dec = inst.numbers.at("decoder_alpha");
  const EncDecModel m(e, 1);
  for (const EncoderLayer& l : m.encoder()) {
    EXPECT_EQ(l.attn_conn.alpha, enc) << c.name;
    EXPECT_EQ(l.mlp_conn.alpha, enc) << c.name;
  }
  for (const DecoderLayer& l : m.decoder())
    for (const Connection* k : {&l.self_conn, &l.cross_conn, &l.mlp_conn}) EXPECT_EQ(k->alpha, dec) << c.name;
  if (e.deepnet()) EXPECT_DOUBLE_EQ(dec, std::pow(3.0 * double(e.decoder_layers), 0.25)) << c.name;
  else EXPECT_EQ(enc, 1.0) << c.name;
}

TEST(Gradcheck, CompositeCasesRecordTheAlphaTheirBlocksRun) {
  int composites = 0, deepnet = 0, encdec = 0;
  for (const GradCase& c : gradcheck_cases()) {
    if (c.kind != "composite") continue;
    ++composites;
    const CaseInstance inst = c.make(CaseShape{}, DType::f64, 1);
    ModelConfig cfg;
    const bool is_encdec = inst.names.at("model") == "encdec";
    cfg.model = is_encdec ? ModelKind::gpt : parse_kind<ModelKind>(inst.names.at("model"));
    cfg.norm = parse_kind<NormKind>(inst.names.at("norm"));
    cfg.placement = parse_kind<Placement>(inst.names.at("placement"));
    cfg.layers = int64_t(inst.numbers.at("layers"));
    cfg.d_model = int64_t(inst.numbers.at("d_model"));
    cfg.d_hidden = int64_t(inst.numbers.at("d_hidden"));
    cfg.heads = int64_t(inst.numbers.at("heads"));
    cfg.vocab = int64_t(inst.numbers.at("vocab"));
    cfg.qk_norm = inst.numbers.at("qk_norm") != 0;
    if (is_encdec) {
      ++encdec;
      cfg.seq_len = CaseShape{}.time + 2;
      expect_encdec_alphas(c, inst, cfg);
      continue;
    }
    const double recorded = inst.numbers.at("deepnorm_alpha");
    const Model m(cfg, 1);
    ASSERT_FALSE(m.blocks().empty()) << c.name;
    for (const Block& b : m.blocks()) EXPECT_EQ(b.alpha, recorded) << c.name;
    if (cfg.placement == Placement::deepnorm && cfg.norm != NormKind::none) {
      ++deepnet;
      EXPECT_DOUBLE_EQ(recorded, std::pow(2.0 * double(cfg.layers), 0.25)) << c.name;
    } else {
      EXPECT_EQ(recorded, 1.0) << c.name;
    }
  }
  EXPECT_GE(deepnet, 1);
  EXPECT_GE(composites, 4);
  EXPECT_GE(encdec, 3);
}
