#!/usr/bin/env bash
# `normlab report results/` checked, and opened in a real browser: builds the site of every committed
# sweep and run, then (scripts/report_check.py) reads every page without a browser, where a link,
# stylesheet, script or image that names no file of the site (or a #fragment no id of its page) fails,
# and loads a fixed sample holding every kind of page in Debian's headless Chromium: the index, the
# experiments page, every sweep's page, the first and last run page of each sweep, every standalone
# run, and the first page of any structure not yet among them (about 100 of about 1870 pages). There
# any console error, exception, resource that did not load, broken image or broken link fails; sorting
# is clicked and checked; screenshots of the index, the experiments page, a sweep and a run are saved.
# ALL_PAGES=1 loads every page in Chromium instead (the old check: about 7 more minutes).
# Installs chromium and python3-websocket when missing (root); runs Debian's /usr/bin/python3, which has it. Run by CI; not by ./scripts/test.sh.
#   ./scripts/report_check.sh                    (site and screenshots in a temporary directory)
#   NORMLAB=build/normlab OUT=/tmp/site SHOTS=/tmp/shots ALL_PAGES=1 ./scripts/report_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
NORMLAB=$(realpath "${NORMLAB:-build/normlab}")
[ -x "$NORMLAB" ] || { echo "report_check: $NORMLAB not built (run ./scripts/build.sh)" >&2; exit 1; }
if ! command -v chromium >/dev/null || ! /usr/bin/python3 -c 'import websocket' 2>/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "report_check: needs chromium and python3-websocket (apt-get install chromium python3-websocket)" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq chromium python3-websocket >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null && apt-get install -y -qq chromium python3-websocket >/dev/null; }
fi
WORK=$(mktemp -d /tmp/normlab_report_check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
OUT=${OUT:-$WORK/site}
SHOTS=${SHOTS:-$WORK/screenshots}
"$NORMLAB" report results/ --out "$OUT" -q
ALL=(); [ "${ALL_PAGES:-0}" = 1 ] && ALL=(--all-pages)
/usr/bin/python3 scripts/report_check.py "$OUT" --screenshots "$SHOTS" "${ALL[@]}"
