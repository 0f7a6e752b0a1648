#!/usr/bin/env bash
# Writes data/kjv.txt: the King James Bible from Debian's bible-kjv package (the `bible` program,
# installed by setup.sh), one verse per line without its reference (4,137,850 bytes, 63 distinct
# characters): the natural-language corpus every machine has, for `--data text:data/kjv.txt`.
# Quiet when it is there already. It never changes a data/kjv.txt it did not write.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="$root/data/kjv.txt"
# The sha256 of what bible-kjv 4.38 (Debian 12) prints; another version of the package may differ.
want="b5c4940bcfeee072c0935b5200d0f9d88a00a0199cb0961d16133458fcdfae5d"

if [ -e "$out" ]; then
  have="$(sha256sum "$out" | cut -d' ' -f1)"
  [ "$have" = "$want" ] && exit 0
  echo "corpus: $out exists and is not the corpus this script writes (sha256 $have): left as it is" >&2
  exit 0
fi
if ! command -v bible >/dev/null 2>&1; then
  echo "corpus: the bible program is missing (apt-get install bible-kjv; scripts/setup.sh does)" >&2
  exit 1
fi
mkdir -p "$root/data"
tmp="$out.partial.$$"
trap 'rm -f "$tmp"' EXIT
# -f: one verse per line ("Ge1:1 In the beginning ..."), whatever the terminal's width; the
# reference up to the first space is dropped.
bible -f gen1:1-rev22:21 </dev/null | sed 's/^[^ ]* //' > "$tmp"
have="$(sha256sum "$tmp" | cut -d' ' -f1)"
if [ "$have" != "$want" ]; then
  echo "corpus: warning: this bible-kjv prints another text (sha256 $have, expected $want): results on it are" \
       "not comparable with those committed" >&2
fi
mv -n "$tmp" "$out"
trap - EXIT
