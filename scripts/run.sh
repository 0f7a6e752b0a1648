#!/usr/bin/env bash
# Quick start, step 1 of 2: installs what is missing, builds normlab (Release), runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh
exec ./build/normlab handcalc "$@"
