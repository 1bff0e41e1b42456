#!/usr/bin/env bash
# Thirty-fourth session: the engine binary of HEAD (build-cuda as of 3148911, packed in
# .devpack/bin.tar.xz: the CUDA / OpenCL host split of the thirty-third session and its mends,
# which had run only on an H100) on the acceptance machine, asked for as an H200. The same steps
# as session_head33.sh: CUDA conformance (fp16, bf16) and model tests, memcheck over the sampling
# and overlap cases, the 64-stream server e2e test on cuda:0, then issue 9's benches (tg128 -r 5
# on TinyLlama, 7B AWQ, 7B GGUF Q4_0; pp512 on TinyLlama and 7B); ~4 min.
#   run: command "bash tools/device/session_head34.sh", kind nvidia-h200, carry [".devpack", ".devshared"]
exec bash "$(dirname "$0")/session_head33.sh"
