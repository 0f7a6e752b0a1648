#!/usr/bin/env bash
# Installs what normlab needs to build and test, only what is missing; quiet when all is there.
# Used by scripts/run.sh and scripts/test.sh.
set -euo pipefail

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in libdnnl-dev ocl-icd-opencl-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libfmt-dev \
           libgtest-dev libboost-context-dev libprotobuf-dev protobuf-compiler cmake g++ make bible-kjv; do
  have_pkg "$pkg" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}" >&2
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq >/dev/null
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# ccache is optional: it only makes rebuilds faster.
if ! command -v ccache >/dev/null 2>&1; then
  (SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"; DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq ccache >/dev/null 2>&1) || true
fi
# The natural-language corpus (data/kjv.txt), from the bible-kjv package installed above.
"$(dirname "$0")/corpus.sh"
