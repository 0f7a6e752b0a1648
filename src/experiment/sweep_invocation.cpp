// `normlab sweep`'s workflow as one call: the CLI parses the flags into a SweepInvocation and
// prints what comes back; tests drive the same call.
#include <filesystem>

#include "normlab/error.h"
#include "normlab/sweep.h"
#include "normlab/system.h"

namespace normlab {

namespace {

namespace fs = std::filesystem;

// Everything the Slurm script needs, checked before anything is created.
SlurmOptions checked_slurm_options(const SweepInvocation& inv, size_t points) {
  SlurmOptions so = inv.slurm_options;
  so.exe = inv.run.exe.empty() ? self_exe() : inv.run.exe;  // the binary the points would run
  so.threads = inv.run.threads;
  so.rerun = inv.rerun;
  so.tensorboard = inv.run.tensorboard;
  if (so.shards == -1) so.shards = static_cast<int>(points);
  check_slurm_options(inv.run.dir, so, points);
  if (inv.submit) check_sbatch_available();
  return so;
}

// What a run would do, DIR untouched. The run directories are read even when the spec changed: a
// --force run keeps every point whose run is whole and of the same config (under its name, or
// carried from the stored spec's), and the count says how many that is.
void dry_run(const SweepInvocation& inv, SweepInvocationResult& r) {
  r.changed = check_sweep_dir(inv.run.dir, r.plan);
  std::error_code ec;
  r.states = fs::exists(fs::path(inv.run.dir) / "spec.json", ec) ? point_states(inv.run.dir, r.plan)
                                                                 : std::vector<PointState>(r.plan.points.size());
  if (!r.changed.empty())
    for (const CarriedRun& c : runs_to_carry(inv.run.dir, r.plan)) {
      PointState& st = r.states[c.to];
      st.status = c.status;
      st.done = true;
      st.carried_from = c.from.name;
    }
  r.work = shard_work(r.plan, r.states, inv.run.shard, inv.rerun);
}

void write_slurm_array(SweepDir& dir, const SweepInvocation& inv, const SlurmOptions& so, SweepInvocationResult& r) {
  r.sbatch_script = write_sbatch_script(dir, so);
  r.slurm_shards = so.shards;
  if (inv.submit) {
    dir.unlock();  // the array's tasks lock DIR themselves, and may start before this process ends
    r.job_id = submit_sbatch(r.sbatch_script);
  }
  dir.keep();
}

}  // namespace

SweepInvocationResult run_sweep_invocation(const SweepInvocation& inv, const SweepCallbacks& cb,
                                           const std::function<void(const ShardWork&)>& on_start) {
  NL_USAGE(!inv.run.dir.empty(), "--out DIR is required (the sweep directory)");
  NL_USAGE(!inv.submit || inv.slurm, "--submit needs --slurm");
  check_run_options(inv.run);
  SweepInvocationResult r;
  r.plan = plan_sweep(inv.request);
  const SlurmOptions so = inv.slurm ? checked_slurm_options(inv, r.plan.points.size()) : SlurmOptions{};
  if (inv.dry_run) {
    dry_run(inv, r);
    return r;
  }
  // Shards of one array share DIR (each point locked while it runs); anything else has it alone.
  SweepDir dir(inv.run.dir, r.plan, inv.force, inv.run.shard.count > 1 ? SweepDir::Lock::shared : SweepDir::Lock::exclusive);
  if (inv.slurm) {
    write_slurm_array(dir, inv, so, r);
    return r;
  }
  r.work = shard_work(r.plan, point_states(inv.run.dir, r.plan), inv.run.shard, inv.rerun);
  if (on_start) on_start(r.work);
  dir.keep();  // from the first point on, what is in DIR is the sweep's
  r.report = run_sweep(r.plan, r.work.todo, inv.run, cb);
  // The summaries cover every run in DIR (other shards included), whatever this invocation ran.
  r.summary = summarize_sweep(inv.run.dir, {});
  write_summaries(inv.run.dir, r.summary);
  return r;
}

}  // namespace normlab
