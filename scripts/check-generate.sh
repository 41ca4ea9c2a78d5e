#!/usr/bin/env bash
# check-generate.sh fails when the committed assembly of package kernels differs from what
# the generator produces (run `scripts/generate.sh` and commit), and checks the encodings
# the Go assembler cannot spell: every vpdpbusd in the AVX-VNNI functions must disassemble
# as `{vex} vpdpbusd`, every one in the AVX-VNNI-INT8 functions as `vpdpbssd` (VEX), and no
# AVX2-class function may touch an AVX-512 register or hold an EVEX-encoded instruction
# (first byte 0x62 in 64-bit mode), which a CPU without AVX-512 cannot execute (the
# generator refuses both too). The AMX instructions, raw bytes in the assembly, must
# disassemble to the instructions their comments name, in order.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/generate.sh
if ! git diff --exit-code --stat -- kernels/; then
  echo "check-generate: regenerated assembly differs from the committed files (run scripts/generate.sh and commit)" >&2
  exit 1
fi
untracked=$(git ls-files --others --exclude-standard -- 'kernels/*_amd64.s' 'kernels/*_amd64.go')
if [ -n "$untracked" ]; then
  echo "check-generate: generated files not committed: $untracked" >&2
  exit 1
fi
if ! command -v objdump >/dev/null; then
  echo "check-generate: objdump not found; skipping the encoding check" >&2
  exit 0
fi
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
go test -c -o "$bin" ./kernels
objdump -d "$bin" | awk '
  /^[0-9a-f]+ <.*>:$/ { fn = $2; vex = (fn ~ /AVXVNNI/); int8 = (fn ~ /VNNIINT8/); avx2 = (fn ~ /AVX2|AVXVNNI/); next }
  vex && /vpdpbusd|vpdpbssd/ {
    n++
    if (int8 && $0 !~ /vpdpbssd/) { print "not vpdpbssd in " fn ": " $0; bad = 1 }
    if (!int8 && $0 !~ /\{vex\} vpdpbusd/) { print "not VEX vpdpbusd in " fn ": " $0; bad = 1 }
  }
  avx2 && /%[xyz]mm(1[6-9]|2[0-9]|3[01])|%zmm|%k[0-7]/ { print "AVX-512 register in " fn ": " $0; bad = 1 }
  avx2 && split($0, f, "\t") >= 3 && f[2] ~ /^62 / && f[3] != "" { print "EVEX encoding in " fn ": " $0; bad = 1 }
  END {
    if (n == 0) { print "no AVX-VNNI dot products found"; bad = 1 }
    if (bad) exit 1
    print "check-generate: " n " VEX dot products verified"
  }'
want=$(sed -n '/^TEXT ·gemmAMX(SB)/,/^	RET/p' kernels/gemm_amd64.s | sed -n 's/^	BYTE .* \/\/ //p')
got=$(objdump -d -M intel --no-show-raw-insn "$bin" | awk '/<bitgo\/kernels\.gemmAMX(\.abi0)?>:$/ { f = 1; next } /^$/ { f = 0 } f' |
  sed -n 's/^ *[0-9a-f]*:\t//p' | grep -E '^(ldtilecfg|tilezero|tileloadd|tilestored|tdpbsud|tilerelease)' | sed 's/ *$//')
if [ -z "$want" ] || [ "$want" != "$got" ]; then
  echo "check-generate: gemmAMX's raw AMX instructions disassemble differently from their comments:" >&2
  diff <(echo "$want") <(echo "$got") >&2 || true
  exit 1
fi
echo "check-generate: $(echo "$want" | wc -l) AMX instructions verified"
