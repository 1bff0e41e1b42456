#!/usr/bin/env bash
# Installs what the fuzz build (cmake --preset fuzz, scripts/ci-fuzz.sh) needs beyond
# scripts/install-deps.sh: clang and libFuzzer's runtime (libclang_rt.fuzzer-x86_64.a is in
# Debian 12's libclang-rt-14-dev).
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(clang libclang-rt-14-dev)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
