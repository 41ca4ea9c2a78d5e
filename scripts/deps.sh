#!/usr/bin/env bash
# deps.sh installs what `make test` and `make demo` need, idempotently:
# Debian packages (only the missing ones) and the Go modules.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(
  python3-torch python3-numpy python3-msgpack python3-pytest   # pyclient tests (torch 1.13)
  libopenblas0-pthread   # Debian's torch uses the system BLAS: without it, netlib's reference one
  pocl-opencl-icd ocl-icd-libopencl1 opencl-c-headers clinfo     # xe2 tests on PoCL's CPU device
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq </dev/null
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
fi
go mod download
