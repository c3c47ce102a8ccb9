#!/usr/bin/env bash
# scripts/ab.sh end to end with one build on both sides (--build-a/--build-b: nothing built): five
# rounds of each in ABBA order, every report written, the comparison over the five pairs.
#   bash test/tools/ab_script_test.sh BUILD_DIR OUT_DIR
set -euo pipefail
build="$1" out="$2"
rm -rf "$out"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
bash "$(dirname "$0")/../../scripts/ab.sh" HEAD HEAD --rounds 5 --fail-on none --build-a "$build" --build-b "$build" \
  --out "$out" -- --operation rms_norm --device cpu --implementation cpu.native.rms_norm --tokens 4 --hidden 64 \
  --dtype float32 --iterations 5 --copy-bytes 1048576 >"$out.md" 2>"$log" || { cat "$log" >&2; exit 1; }
fail() { echo "ab_script_test: $*" >&2; cat "$log" >&2; exit 1; }
order="$(sed -n 's/^\[ab\] round [0-9]*: \([ab]\)$/\1/p' "$log" | tr -d '\n')"
[ "$order" = "abbaabbaab" ] || fail "runs in the order '$order', expected abbaabbaab (ABBA)"
for i in 0 1 2 3 4; do
  [ -s "$out/a-$i.json" ] && [ -s "$out/b-$i.json" ] || fail "round $i's reports missing in $out"
done
grep -q '"rounds": 5' "$out/ab.json" || fail "ab.json does not say 5 rounds"
grep -q '"implementation": "cpu.native.rms_norm"' "$out/ab.json" || fail "ab.json has no row of cpu.native.rms_norm"
grep -q "5 rounds of each build" "$out.md" || fail "no comparison printed"
echo "ab_script_test: 5 rounds of each build in ABBA order; comparison in $out/ab.json"
