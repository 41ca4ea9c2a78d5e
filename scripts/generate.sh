#!/usr/bin/env bash
# generate.sh deletes and regenerates the avo-generated amd64 assembly of package kernels
# (kernels/<op>_amd64.s and its //go:noescape stubs kernels/<op>_amd64.go) from the
# generator module kernels/_asm. Run it after changing the generator; commit the result.
set -euo pipefail
cd "$(dirname "$0")/../kernels"
OPS=(gemv gemm epilogue float misc)
for op in "${OPS[@]}"; do
  rm -f "${op}_amd64.s" "${op}_amd64.go"
done
cd _asm
for op in "${OPS[@]}"; do
  go run . -op "$op" -out "../${op}_amd64.s" -stubs "../${op}_amd64.go" -pkg kernels
done
