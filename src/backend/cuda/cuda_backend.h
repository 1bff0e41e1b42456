// The CUDA backend: the Backend ops on an NVIDIA GPU with fp16 (or bf16) activations.
//   - Weights are uploaded once and repacked for the kernels (int4 W4A16 and int8 layouts of
//     linear.cuh; dense fp16/bf16 matrices for cuBLAS), the host copies then released.
//   - Linear layers: W4A16 GEMV for decode (1-8 tokens), tensor-core W4A16 GEMM for more, and
//     dequantize + cuBLAS for large prefill batches; dense weights through cuBLAS.
//   - Attention: paged flash-decoding (split-KV) and FlashAttention-2-style prefill tiles
//     (attention.cuh); RoPE + Qwen3 head norm + KV store fused (rope_kv.cuh).
//   - Decode-only steps are captured once per shape as CUDA graphs and replayed.
//   - Greedy rows are sampled on the GPU (penalties + argmax); other rows are copied to the host
//     and sampled by the reference sampler.
// Environment: PERFX_CUDA_DTYPE=f16|bf16 (activations; default f16), PERFX_CUDA_GRAPHS=0 (off).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace perfx::cuda {

/// The backend on GPU `index`. Throws perfx::Error when no driver or GPU is usable or the index is
/// out of range, naming the GPUs present.
std::unique_ptr<Backend> create_cuda_backend(int index);

}  // namespace perfx::cuda
