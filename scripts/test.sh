#!/usr/bin/env bash
# Quick start, step 2 of 2: installs what is missing, builds everything, runs every test with ctest.
#   SANITIZE=1 ./scripts/test.sh   the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   WERROR=1 ./scripts/test.sh     warnings are errors (CI)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
werror=OFF
[ "${WERROR:-0}" = "1" ] && werror=ON
if [ "${SANITIZE:-0}" = "1" ]; then
  export BUILD_DIR=build-asan
  ./scripts/build.sh -DNORMLAB_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNORMLAB_WERROR=$werror
else
  export BUILD_DIR=build
  ./scripts/build.sh -DNORMLAB_WERROR=$werror
fi
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
