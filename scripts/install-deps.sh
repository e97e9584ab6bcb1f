#!/usr/bin/env bash
# Installs the Debian packages lynx-moe needs to build, test and run its tools.
# Idempotent: does nothing (beyond a dpkg query) when everything is already there.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev
  libhwy-dev            # SIMD with runtime dispatch
  libpcre2-dev          # tokenizer pre-tokenizer regexes
  nlohmann-json3-dev    # JSON for the server, eval and bench output
  libcpp-httplib-dev    # HTTP server
  libboost-dev          # Boost.Beast's HTTP/1.1 request parser (header-only)
  libcli11-dev          # command-line flags
  liburing-dev          # io_uring reads of the expert tier (--expert-io uring)
  openmpi-bin libopenmpi-dev  # expert parallelism over MPI (src/dist, optional at build)
  clang libclang-rt-14-dev  # libFuzzer target for the GGUF reader
  python3 python3-numpy # independent reference forward pass (tests/reference)
  python3-matplotlib    # scripts/plot.py: the figures, from the commands' JSON
  python3-jinja2        # reference renderer of the chat-template goldens (tests/template)
  chromium              # the chat page's browser test (scripts/e2e-chatpage, headless)
)
if [[ "${1:-}" == "--train" ]]; then
  PKGS+=(python3-torch libopenblas0)
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
