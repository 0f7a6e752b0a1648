// Training on cuda-sim (docs/cuda.md): the CUDA kernels, device-resident, give the cpu backend's
// loss curve; a steady-state step allocates nothing and moves only the batch and a few scalars;
// checkpoints and resume work from device memory. Test names carry "CudaSim": ctest label cuda.
#include <gtest/gtest.h>

#include <cmath>

#include "normlab/backend.h"
#include "normlab/checkpoint.h"
#include "normlab/cuda_backend.h"
#include "normlab/train.h"
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
struct Curve {
  std::vector<double> train;
  TrainResult result;
};
Curve run_on(Device device, const TrainConfig& cfg) {
  set_compute_device(device);
  Curve c;
  TrainHooks h;
  h.on_step = [&c](int64_t, double loss) { c.train.push_back(loss); };
  c.result = train(cfg, h);
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
  h.on_checkpoint = [&](int64_t step, Model& model, const TrainState& st) {
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

}  // namespace
}  // namespace normlab
