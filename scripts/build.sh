#!/usr/bin/env bash
# Configures and builds normlab in build/ (Release); prints only warnings and errors.
# Extra arguments go to cmake's configure step:
#   BUILD_DIR=build-asan ./scripts/build.sh -DNORMLAB_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# ccache's keys name paths relative to the checkout and leave the build directory out, so that
# every clone of the repository (CI's fresh one included) reuses what another clone compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
jobs=$(nproc 2>/dev/null || echo 2)
# A cache without a Makefile is an interrupted configure: run it again.
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] || [ ! -f "$BUILD_DIR/Makefile" ] || [ $# -gt 0 ]; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
if ! out=$(cmake --build "$BUILD_DIR" -j "$jobs" 2>&1); then
  echo "$out" | grep -Ev '^\[ *[0-9]+%\] (Building|Linking)' >&2
  echo "build failed" >&2
  exit 1
fi
echo "$out" | grep -E 'warning:' >&2 || true
