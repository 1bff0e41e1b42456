#!/bin/sh
# Issue 4 memory acceptance on the development machine (no torch/numpy needed): writes a
# Llama-2-7B-shaped AutoAWQ g128 checkpoint with random weights (3.9 GB, with our own checkpoint
# writer, into BUILD/test_tmp/llama2-7b-awq-random, reused on later runs) and runs
# `/usr/bin/time -v perfx run -m DIR -n 16 -c 512`, asserting peak RSS <= 3.9 GB.
# Usage: tools/reference/awq_memory_test.sh [BUILD_DIR]   (default: build)
set -eu
BUILD=${1:-build}
cmake --build "$BUILD" --target perfx test_quant
PERFX_MEMORY_TEST=1 "$BUILD/tests/test_quant" --gtest_filter='RandomCheckpoint.Llama2_7bRunsIn3_9GB'
