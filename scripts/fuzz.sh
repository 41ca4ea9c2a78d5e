#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target of the module briefly (FUZZTIME, default 4s each).
# Targets are found by name, so a new `func FuzzXxx(f *testing.F)` is covered without edits.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-4s}
fail=0
while IFS=: read -r file name; do
  dir=$(dirname "$file")
  tags=""
  if head -5 "$file" | grep -q '^//go:build integration'; then tags="-tags=integration"; fi
  echo "fuzz: $dir $name ($FUZZTIME)"
  if ! go test $tags -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "$dir" > /tmp/fuzz-$$.log 2>&1; then
    cat /tmp/fuzz-$$.log
    fail=1
  fi
done < <(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+' . | grep -v '^./kernels/_asm/' | sed -E 's/:func /:/')
rm -f /tmp/fuzz-$$.log
exit $fail
