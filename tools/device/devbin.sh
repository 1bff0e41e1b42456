# Sourced (from the repository root) by the tools/device scripts that run the binaries packed by
# tools/device/pack_cuda_bins.sh: unpacks .devpack/bin.tar.xz into /tmp/devbin and puts the
# libraries the GPU machine lacks (.devpack/lib) and CUDA's on LD_LIBRARY_PATH. Sets ROOT (the
# repository root) and B (the folder with perfx, perfx_opencl_check and tests/).
ROOT=$PWD
mkdir -p /tmp/devbin
export LD_LIBRARY_PATH="$ROOT/.devpack/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
tar -xJf "$ROOT/.devpack/bin.tar.xz" -C /tmp/devbin
B=/tmp/devbin/.devbin
