#!/usr/bin/env bash
# Quick start, step 2 of 2: installs what is missing, builds everything, runs every test with ctest.
#   SANITIZE=1 ./scripts/test.sh   the same under AddressSanitizer + UndefinedBehaviorSanitizer
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
if [ "${SANITIZE:-0}" = "1" ]; then
  export BUILD_DIR=build-asan
  [ -f "$BUILD_DIR/CMakeCache.txt" ] || ./scripts/build.sh -DNORMLAB_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
else
  export BUILD_DIR=build
fi
./scripts/build.sh
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
