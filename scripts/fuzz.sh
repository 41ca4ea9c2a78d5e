#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target of the module briefly (FUZZTIME, default 4s each).
# Targets are found by name, so a new `func FuzzXxx(f *testing.F)` is covered without edits.
#
# Go 1.26's fuzz coordinator can end a duration-bounded run with a bare "context deadline
# exceeded" failure when a worker is mid-call as -fuzztime expires on a loaded machine
# (golang/go#75804, fixed in Go 1.27). A real finding always prints "Failing input written
# to" (or a panic); so a failure whose log has only the deadline message and no reproducer is
# re-checked by replaying the target's seed and saved corpus deterministically, and passes
# if that replay passes. Anything else fails.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-4s}
fail=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
while IFS=: read -r file name; do
  dir=$(dirname "$file")
  tags=""
  if head -5 "$file" | grep -q '^//go:build integration'; then tags="-tags=integration"; fi
  echo "fuzz: $dir $name ($FUZZTIME)"
  if go test $tags -run='^$' -fuzz="^${name}\$" -fuzztime="$FUZZTIME" "$dir" >"$log" 2>&1; then
    continue
  fi
  if grep -q 'context deadline exceeded' "$log" && ! grep -qE 'Failing input written|panic:' "$log" \
     && ! grep -qE '^\s+[a-z_]+_test\.go:[0-9]+:' "$log"; then
    echo "fuzz: $name: the Go 1.26 fuzz-deadline race (golang/go#75804), no reproducer; replaying the corpus"
    if go test $tags -count=1 -run="^${name}\$" "$dir" >"$log" 2>&1; then
      continue
    fi
  fi
  cat "$log"
  fail=1
done < <(grep -rHo --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+' . | grep -v '^./kernels/_asm/' | sed -E 's/:func /:/')
exit $fail
