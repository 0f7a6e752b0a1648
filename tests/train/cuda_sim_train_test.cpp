// Training on cuda-sim (docs/cuda.md): the CUDA kernels, device-resident, give the cpu backend's
// loss curve; a steady-state step allocates nothing and moves only the batch and a few scalars;
// checkpoints and resume work from device memory. Test names carry "CudaSim": ctest label cuda.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/backend.h"
#include "normlab/checkpoint.h"
#include "normlab/cuda_backend.h"
#include "normlab/nn.h"
#include "normlab/ops.h"
#include "normlab/train.h"
#include "normlab/train_model.h"
#include "test_util.h"

namespace normlab {
namespace {

TrainConfig tiny(ModelKind kind) {
  TrainConfig c;
  c.model.model = kind;
  c.model.layers = 2;
  c.model.d_model = 32;
  c.model.d_hidden = 64;
  c.model.heads = 2;
  c.model.vocab = 32;
  c.model.seq_len = 8;
  c.batch_size = 4;
  c.steps = 12;
  c.eval_every = 4;
  c.eval_batches = 2;
  c.threads = 1;
  c.lr = 3e-3;
  return c;
}

// Runs `cfg` with the model on `device`; the per-step train losses and the eval records.
// (native: how a low precision is stored on the device, ops.h set_native_low_precision.)
struct Curve {
  std::vector<double> train;
  TrainResult result;
};
Curve run_on(Device device, const TrainConfig& cfg, bool native = true) {
  set_compute_device(device);
  set_native_low_precision(native);
  Curve c;
  TrainHooks h;
  h.on_step = [&c](int64_t, double loss) { c.train.push_back(loss); };
  c.result = train(cfg, h);
  set_native_low_precision(true);
  set_compute_device(Device::cpu);
  return c;
}

// The kernels differ from the cpu's in summation order (block reductions, a reference GEMM),
// so curves agree to float32 rounding amplified by training: 1e-4 relative over 12 steps (the
// first step's loss, before any update, to 1e-5).
void expect_same_curve(const Curve& cpu, const Curve& sim) {
  ASSERT_EQ(cpu.train.size(), sim.train.size());
  EXPECT_NEAR(sim.train[0], cpu.train[0], 1e-5 * std::abs(cpu.train[0]));
  for (size_t i = 0; i < cpu.train.size(); ++i)
    EXPECT_NEAR(sim.train[i], cpu.train[i], 1e-4 * std::abs(cpu.train[i])) << "step " << i + 1;
  ASSERT_EQ(cpu.result.evals.size(), sim.result.evals.size());
  for (size_t i = 0; i < cpu.result.evals.size(); ++i) {
    EXPECT_NEAR(sim.result.evals[i].val_loss, cpu.result.evals[i].val_loss, 1e-4 * cpu.result.evals[i].val_loss);
    EXPECT_NEAR(sim.result.evals[i].grad_norm, cpu.result.evals[i].grad_norm, 1e-3 * cpu.result.evals[i].grad_norm);
  }
  EXPECT_EQ(sim.result.status, cpu.result.status);
}

TEST(CudaSimTrain, ToyModelFollowsTheCpuLossCurve) {
  const TrainConfig cfg = tiny(ModelKind::toy);
  expect_same_curve(run_on(Device::cpu, cfg), run_on(Device::cuda_sim, cfg));
}

TEST(CudaSimTrain, GptModelWithQkNormAndRmsNormFollowsTheCpuLossCurve) {
  TrainConfig cfg = tiny(ModelKind::gpt);
  cfg.model.norm = NormKind::rmsnorm;
  cfg.model.qk_norm = true;
  expect_same_curve(run_on(Device::cpu, cfg), run_on(Device::cuda_sim, cfg));
}

TEST(CudaSimTrain, PostLnGptFollowsTheCpuLossCurve) {
  TrainConfig cfg = tiny(ModelKind::gpt);
  cfg.model.placement = Placement::post;
  expect_same_curve(run_on(Device::cpu, cfg), run_on(Device::cuda_sim, cfg));
}

// Dropout on the embeddings, the sublayers' outputs and attention's probabilities: the CUDA kernels
// draw the cpu's masks (one hash of (key, index) on both), so the curves agree as without it.
TEST(CudaSimTrain, GptModelWithDropoutFollowsTheCpuLossCurve) {
  TrainConfig cfg = tiny(ModelKind::gpt);
  cfg.dropout = 0.2;
  expect_same_curve(run_on(Device::cpu, cfg), run_on(Device::cuda_sim, cfg));
}

// Steady state: between two steps (no eval between them) nothing is allocated on the device
// and the host <-> device traffic is the batch (ids and targets) up and two scalars (the loss,
// the gradient norm) down, plus the ids checks' flags.
TEST(CudaSimTrain, SteadyStepMovesOnlyTheBatchAndScalarsAndAllocatesNothing) {
  TrainConfig cfg = tiny(ModelKind::gpt);
  cfg.steps = 8;
  cfg.eval_every = 100;
  set_compute_device(Device::cuda_sim);
  std::vector<CudaTransfers> at;
  std::vector<ArenaStats> arena;
  TrainHooks h;
  h.on_step = [&](int64_t, double) {
    at.push_back(cuda_sim_transfers());
    arena.push_back(arena_stats(Device::cuda_sim));
  };
  (void)train(cfg, h);
  set_compute_device(Device::cpu);
  ASSERT_GE(at.size(), 6u);
  const uint64_t batch_bytes = 2u * static_cast<uint64_t>(cfg.batch_size * cfg.model.seq_len) * sizeof(int32_t);
  for (size_t i = 3; i + 1 < at.size(); ++i) {
    const uint64_t up = at[i + 1].upload_bytes - at[i].upload_bytes;
    const uint64_t down = at[i + 1].download_bytes - at[i].download_bytes;
    EXPECT_EQ(arena[i + 1].system_allocs, arena[i].system_allocs) << "step " << i + 2 << " allocated device memory";
    EXPECT_LE(up, batch_bytes + 256) << "step " << i + 2;
    EXPECT_GE(up, batch_bytes) << "step " << i + 2 << ": the batch must be uploaded";
    EXPECT_LE(down, 256u) << "step " << i + 2 << " downloaded more than scalars";
  }
}

// A run checkpointed on cuda-sim and resumed there ends where the uninterrupted run ends.
TEST(CudaSimTrain, CheckpointAndResumeFromDeviceMemory) {
  TrainConfig cfg = tiny(ModelKind::toy);
  const auto dir = test::fresh_dir("cuda_sim_resume");
  std::filesystem::create_directories(dir);
  set_compute_device(Device::cuda_sim);
  const TrainResult whole = train(cfg, TrainHooks{});
  ResumePoint point;
  TrainHooks h;
  h.checkpoint_every = 6;
  h.on_checkpoint = [&](int64_t step, TrainModel& model, const TrainState& st) {
    if (step != 6) return;
    point.weights = (dir / "model.safetensors").string();
    save_safetensors(point.weights, model_state(model), {});
    point.state = st;
  };
  (void)train(cfg, h);
  ASSERT_FALSE(point.weights.empty());
  ASSERT_EQ(point.state.adam_m.device(), Device::cpu);
  const TrainResult resumed = train(cfg, TrainHooks{}, &point);
  set_compute_device(Device::cpu);
  EXPECT_EQ(resumed.final_val_loss, whole.final_val_loss);
  EXPECT_EQ(resumed.final_train_loss, whole.final_train_loss);
  // The checkpoint holds the device's values, downloaded: it loads on the cpu.
  const SafetensorsFile f = load_safetensors(point.weights);
  EXPECT_FALSE(f.tensors.empty());
}

// Native bf16 / fp16 storage on the device (2-byte activations and gradients, every kernel
// rounding once at its store) is the float32-storage emulation bit for bit: every step's loss,
// every eval's loss, gradient norm and loss scale, in both formats, for each way a norm runs and
// with a float32 residual stream (PyTorch autocast's), Pre-LN and Post-LN.
TEST(CudaSimTrain, NativeLowPrecisionIsTheEmulationBitForBit) {
  struct Case {
    const char* name;
    TrainConfig cfg;
  };
  // Six steps, an evaluation every three, stored in p.
  auto six_steps = [](ModelKind kind, Precision p) {
    TrainConfig c = tiny(kind);
    c.steps = 6;
    c.eval_every = 3;
    c.precision = p;
    return c;
  };
  std::vector<Case> cases;
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    cases.push_back({"toy layernorm fused", six_steps(ModelKind::toy, p)});
    TrainConfig gpt = six_steps(ModelKind::gpt, p);
    gpt.model.norm = NormKind::rmsnorm;
    gpt.model.qk_norm = true;
    cases.push_back({"gpt rmsnorm qk-norm fused", gpt});
    TrainConfig composite = gpt;
    composite.model.norm = NormKind::layernorm;
    composite.norm_compute = NormCompute::format;
    // torch init: at gpt2's the fp16 composite's backward overflows (rsqrt's, r near 50) and every
    // gradient is NaN, which compares equal to nothing.
    composite.model.init = InitScheme::torch;
    cases.push_back({"gpt layernorm composite", composite});
    TrainConfig upcast = gpt;
    upcast.norm_compute = NormCompute::fp32;
    upcast.residual_dtype = ResidualDtype::fp32;
    cases.push_back({"gpt rmsnorm fp32 stream", upcast});
    TrainConfig post = gpt;
    post.model.placement = Placement::post;
    post.model.qk_norm = false;
    cases.push_back({"gpt post-ln", post});
  }
  // The variants' kernels (DyT/Derf, the channel scale, Gemma's 1 + w gain): native storage is the
  // emulation for them too.
  TrainConfig dyt = six_steps(ModelKind::gpt, Precision::bf16);
  dyt.model.norm = NormKind::dyt;
  dyt.model.residual_scale = ResidualScale::layerscale;
  dyt.model.layerscale_init = 0.5;
  cases.push_back({"gpt dyt layerscale", dyt});
  TrainConfig derf = six_steps(ModelKind::toy, Precision::fp16);
  derf.model.norm = NormKind::derf;
  derf.model.placement = Placement::post;
  cases.push_back({"toy post-derf", derf});
  TrainConfig gemma = six_steps(ModelKind::gpt, Precision::bf16);
  gemma.model.norm = NormKind::rmsnorm;
  gemma.model.qk_norm = true;
  gemma.model.gemma_norm = true;
  gemma.model.residual_scale = ResidualScale::skipinit;
  cases.push_back({"gpt gemma rmsnorm skipinit", gemma});
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {}", c.name, to_string(c.cfg.storage())));
    const Curve native = run_on(Device::cuda_sim, c.cfg, true);
    const Curve emulated = run_on(Device::cuda_sim, c.cfg, false);
    ASSERT_EQ(native.train.size(), emulated.train.size());
    for (size_t i = 0; i < native.train.size(); ++i) EXPECT_EQ(native.train[i], emulated.train[i]) << "step " << i + 1;
    ASSERT_EQ(native.result.evals.size(), emulated.result.evals.size());
    for (size_t i = 0; i < native.result.evals.size(); ++i) {
      const EvalRecord &a = native.result.evals[i], &b = emulated.result.evals[i];
      EXPECT_EQ(a.val_loss, b.val_loss) << "eval " << i;
      EXPECT_EQ(a.grad_norm, b.grad_norm) << "eval " << i;
      if (!std::isnan(a.loss_scale) || !std::isnan(b.loss_scale)) {  // NaN: no scaler (bf16)
        EXPECT_EQ(a.loss_scale, b.loss_scale) << "eval " << i;
      }
    }
    EXPECT_EQ(native.result.status, emulated.result.status);
    EXPECT_EQ(native.result.final_val_loss, emulated.result.final_val_loss);
  }
}

// What native storage is for: a model's activations held for the backward take half the bytes
// (the float32 statistics, probabilities and casts of the parameters aside), and the outputs are
// 2-byte tensors of the format.
TEST(CudaSimTrain, NativeLowPrecisionHoldsActivationsInTwoBytes) {
  TrainConfig cfg = tiny(ModelKind::gpt);
  cfg.model.layers = 4;
  cfg.model.d_model = 64;
  cfg.model.d_hidden = 256;
  cfg.model.seq_len = 16;
  cfg.batch_size = 8;
  (void)backend("cuda-sim");  // its memory hooks
  Model model(cfg.model, 3);
  model.params().flatten(Device::cuda_sim);
  std::vector<int32_t> ids(static_cast<size_t>(cfg.batch_size * cfg.model.seq_len));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % cfg.model.vocab);
  const Shape shape{cfg.batch_size, cfg.model.seq_len};
  const Tensor inputs = Tensor::from_ids(ids, shape).to_device(Device::cuda_sim);
  const Tensor targets = inputs;
  auto held_bytes = [&](bool native) {
    set_native_low_precision(native);
    StoragePrecisionScope scope(Precision::bf16);
    const uint64_t before = arena_stats(Device::cuda_sim).bytes_in_use;
    Tensor loss = model.loss(inputs, targets);
    const uint64_t after = arena_stats(Device::cuda_sim).bytes_in_use;
    set_native_low_precision(true);
    return static_cast<double>(after - before);
  };
  const double emulated = held_bytes(false), native = held_bytes(true);
  RecordProperty("held_bytes_ratio", fmt::format("{:.3f}", native / emulated));
  EXPECT_LT(native, 0.62 * emulated) << native << " bytes held natively, " << emulated << " emulated";
  EXPECT_GT(native, 0.45 * emulated) << "the float32 parts (statistics, parameters' casts) cannot vanish";

  StoragePrecisionScope scope(Precision::fp16);
  const Tensor x = Tensor::from({1.0, -2.5, 70000.0, 1e-8}, {1, 4}).to_device(Device::cuda_sim);
  const Tensor y = scale(x, 1.0);  // x cast to fp16 storage, then scaled into fp16 storage
  EXPECT_EQ(y.dtype(), DType::f16);
  EXPECT_EQ(y.nbytes(), 8u);
  const std::vector<double> v = y.to_vector();
  EXPECT_EQ(v[0], 1.0);
  EXPECT_EQ(v[1], -2.5);
  EXPECT_TRUE(std::isinf(v[2])) << "70000 overflows fp16";
  EXPECT_EQ(v[3], 0.0) << "1e-8 underflows fp16";
}

}  // namespace
}  // namespace normlab
