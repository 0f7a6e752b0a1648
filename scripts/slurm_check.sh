#!/usr/bin/env bash
# Proves `normlab sweep`'s Slurm path against a real Slurm (no mock): a one-node cluster (munge +
# slurmctld + slurmd, Debian's slurm-wlm) in a temporary directory; an 8-point sweep submitted with
# `--slurm --submit` as an array of 4 shards; waits; summarizes; checks the summary equals the same
# sweep run locally; stops the daemons it started (also on failure).
#   ./scripts/slurm_check.sh            (needs root the first time: apt-get, daemons)
#   NORMLAB=build/normlab KEEP=1 ./scripts/slurm_check.sh   (KEEP=1 keeps the work directory)
set -euo pipefail
cd "$(dirname "$0")/.."
NORMLAB=$(realpath "${NORMLAB:-build/normlab}")
[ -x "$NORMLAB" ] || { echo "slurm_check: $NORMLAB not built (run ./scripts/build.sh)" >&2; exit 1; }

# The norm kernels' fixed rule in every run, the Slurm tasks' and the local sweep's: a process that
# finds no cached choice for a shape class times the candidates, and two processes timing at once on
# a loaded machine can choose differently (oneDNN's LayerNorm rounds differently from normlab's own),
# which would make the two summaries differ for a reason that is not the Slurm path. sbatch passes
# the environment on to the tasks.
export NORMLAB_TUNE=off

say() { echo "slurm_check: $*" >&2; }
fail() { say "FAILED: $*"; exit 1; }

# ---- install what is missing --------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null ||
   ! command -v munged >/dev/null; then
  [ "$(id -u)" = 0 ] || fail "slurm-wlm and munge are not installed and this is not root (apt-get install slurm-wlm munge)"
  say "installing slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y slurm-wlm munge >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y slurm-wlm munge >/dev/null; }
fi
[ "$(id -u)" = 0 ] || fail "the one-node cluster runs its daemons as root (SlurmdUser=root): run as root"

WORK=$(mktemp -d /tmp/normlab_slurm_check.XXXXXX)
STARTED_MUNGE=0
cleanup() {
  local rc=$?
  # Stop only what this script started, by the pids in its own pid files.
  for name in slurmd slurmctld; do
    if [ -f "$WORK/$name.pid" ]; then
      pid=$(cat "$WORK/$name.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  if [ "$STARTED_MUNGE" = 1 ] && [ -f "$WORK/munged.pid" ]; then
    kill "$(cat "$WORK/munged.pid")" 2>/dev/null || true
  fi
  if [ "$rc" != 0 ]; then
    for log in slurmctld.log slurmd.log; do
      [ -f "$WORK/$log" ] && { say "--- tail of $log"; tail -n 15 "$WORK/$log" >&2; }
    done
    for f in "$WORK"/sweep/slurm/*.out; do [ -f "$f" ] && { say "--- $f"; tail -n 20 "$f" >&2; }; done
  fi
  if [ "${KEEP:-0}" = 1 ] || [ "$rc" != 0 ]; then say "work directory kept: $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- munge: reuse a running one, else start our own ------------------------------------------------
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  [ -f /etc/munge/munge.key ] || mungekey -c
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  munged --force --pid-file="$WORK/munged.pid" --log-file="$WORK/munged.log" 2>/dev/null
  STARTED_MUNGE=1
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge >/dev/null || fail "munged does not answer"
fi

# ---- a one-node cluster of our own (SLURM_CONF points every Slurm command at it) ----------------------
HOST=$(hostname -s)
CPUS=$(nproc)
MEM=$(awk '/MemAvailable/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
mkdir -p "$WORK/state" "$WORK/spool"
cat > "$WORK/slurm.conf" <<EOF
ClusterName=normlabcheck
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurmctld.log
SlurmdLogFile=$WORK/slurmd.log
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=$HOST CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$WORK/slurm.conf"
if scontrol ping 2>/dev/null | grep -q 'is UP'; then fail "a slurmctld already answers on this machine; stop it first"; fi
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 120); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.5; done
sinfo -h -o %T | grep -q idle || fail "the node did not come up idle: $(sinfo 2>&1)"
say "cluster up: $(sinfo -h -o '%P %D %T %c cpus')"

# ---- the sweep: 8 points, 4 shards ----------------------------------------------------------------------
GRID=(lr=1e-3,1e-2 placement=pre,post seed=0,1 --set layers=2 --set d_model=16 --set d_hidden=32 --set steps=40
      --set eval_every=10 --set batch_size=4 --set eval_batches=2)
out=$("$NORMLAB" sweep --out "$WORK/sweep" "${GRID[@]}" --slurm --slurm-shards 4 --slurm-cpus 1 --slurm-time 00:10:00 \
      --slurm-partition debug --submit)
echo "$out" >&2
job=$(echo "$out" | sed -n 's/^submitted job \([0-9]*\).*/\1/p')
[ -n "$job" ] || fail "no job id in: $out"
grep -q -- '--array=0-3' "$WORK/sweep/sweep.sbatch" || fail "sweep.sbatch is not a 4-task array"
for _ in $(seq 600); do [ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && break; sleep 0.5; done
[ -z "$(squeue -h -j "$job" 2>/dev/null)" ] || fail "job $job still queued or running after 300 s: $(squeue)"
states=$(scontrol show job "$job" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | sort | uniq -c | tr -s ' ')
say "array job $job: $states"
[ "$(scontrol show job "$job" | grep -c 'JobState=COMPLETED')" = 4 ] || fail "not every array task completed: $states"

# Every shard ran its own points: 8 starts from 4 distinct shards, each point once.
starts=$(grep -c '"event":"start"' "$WORK/sweep/manifest.jsonl")
shards=$(grep -o '"shard":"[0-9]*/4"' "$WORK/sweep/manifest.jsonl" | sort -u | wc -l)
[ "$starts" = 8 ] || fail "expected 8 point starts in the manifest, found $starts"
[ "$shards" = 4 ] || fail "expected points from 4 shards, found $shards"

"$NORMLAB" sweep summarize "$WORK/sweep" >/dev/null
"$NORMLAB" sweep --out "$WORK/local" "${GRID[@]}" --jobs 2 -q >/dev/null
for f in summary.md summary.csv summary.json; do
  cmp -s "$WORK/sweep/$f" "$WORK/local/$f" || { diff "$WORK/sweep/$f" "$WORK/local/$f" >&2 || true; fail "$f differs from the local sweep's"; }
done
say "OK: 8 points as 4 array tasks on Slurm ($(sinfo -V)); the summary equals the local sweep's"
