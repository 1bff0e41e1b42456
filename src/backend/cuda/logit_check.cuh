// The model-output check the GPU sampling kernels share with the reference sampler
// (cpu::sample_logits, step 0): a NaN or +inf logit means the weights are corrupt or the
// activations overflowed; −inf is a masked token and allowed. A kernel that sees one writes −1 for
// its row, and the host reports the row (cuda_sampling.cpp).
#pragma once

namespace perfx::cuda {

__device__ __forceinline__ bool broken_logit(float v) {
  return !(v < __int_as_float(0x7f800000));  // NaN or +inf
}

}  // namespace perfx::cuda
