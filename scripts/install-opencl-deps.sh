#!/usr/bin/env bash
# Installs the Debian 12 packages the OpenCL backend builds and tests with: the Khronos headers
# (opencl-headers: C and C++), the ICD loader (ocl-icd-opencl-dev) and PoCL, an OpenCL driver for
# the CPU (pocl-opencl-icd). With --cross also the aarch64 cross compiler for the ARM64 build.
# Used by scripts/ci-opencl.sh (and so .ci/run). Uses sudo when not root.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
PKGS=(opencl-headers ocl-icd-opencl-dev pocl-opencl-icd)
if [ "${1:-}" = "--cross" ]; then PKGS+=(g++-aarch64-linux-gnu); fi
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
