#!/usr/bin/env bash
# Installs the Debian 12 packages PerfXLLM builds and tests with. Used by the README and .ci/run.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(build-essential cmake ninja-build pkg-config
      nlohmann-json3-dev libcli11-dev libpcre2-dev libcpp-httplib-dev libspdlog-dev libfmt-dev
      googletest libgtest-dev libgmock-dev libbenchmark-dev)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
