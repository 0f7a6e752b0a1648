#!/usr/bin/env bash
# normlab's TensorBoard files read back by TensorBoard itself: trains a run with --tensorboard
# (one that diverges too), runs a 4-point sweep with --tensorboard, exports both the sweep and a
# run with `export tensorboard`, and checks every scalar of each against its run's metrics.jsonl,
# timing.jsonl and result.json with scripts/tensorboard_check.py (TensorBoard's EventAccumulator),
# and the trained runs once more through the TensorBoard web app's HTTP API (--serve).
# Makes a virtual environment with the tensorboard package (PyPI) the first time.
#   ./scripts/tensorboard_check.sh
#   NORMLAB=build/normlab VENV=/tmp/tb-venv KEEP=1 ./scripts/tensorboard_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
NORMLAB=$(realpath "${NORMLAB:-build/normlab}")
[ -x "$NORMLAB" ] || { echo "tensorboard_check: $NORMLAB not built (run ./scripts/build.sh)" >&2; exit 1; }
VENV=${VENV:-/tmp/normlab-tensorboard-venv}
if ! "$VENV/bin/python" -c 'import tensorboard' 2>/dev/null; then
  python3 -m venv "$VENV" 2>/dev/null || { apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$VENV"; }
  "$VENV/bin/pip" install -q tensorboard
fi
WORK=$(mktemp -d /tmp/normlab_tensorboard_check.XXXXXX)
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
mkdir runs
"$NORMLAB" train -q --layers 3 --steps 60 --eval_every 20 --out runs/ok --tensorboard tb-train/ok >/dev/null
# Post-LN without a norm at large lrs: one collapses, one diverges (at step 2: no eval before it);
# their events end with the status
"$NORMLAB" train -q --norm none --placement post --layers 6 --lr 3 --steps 60 --eval_every 20 --out runs/collapsed \
  --tensorboard tb-train/collapsed >/dev/null
"$NORMLAB" train -q --norm none --placement post --layers 6 --lr 30 --steps 60 --eval_every 20 --out runs/diverged \
  --tensorboard tb-train/diverged >/dev/null
grep -q '"status": "diverged"' runs/diverged/result.json || { echo "tensorboard_check: runs/diverged did not diverge" >&2; exit 1; }
"$NORMLAB" train -q --model gpt --qk_norm true --layers 2 --steps 40 --eval_every 20 --out runs/gpt \
  --tensorboard tb-train/gpt >/dev/null
"$NORMLAB" sweep -q --out sweep --jobs 2 --tensorboard tb-sweep steps=40 eval_every=20 layers=2,4 placement=pre,post >/dev/null
"$NORMLAB" export tensorboard -q sweep runs --out tb-export >/dev/null
"$VENV/bin/python" "$REPO/scripts/tensorboard_check.py" tb-train runs --serve
"$VENV/bin/python" "$REPO/scripts/tensorboard_check.py" tb-sweep sweep/runs
"$VENV/bin/python" "$REPO/scripts/tensorboard_check.py" tb-export .
