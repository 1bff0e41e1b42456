// AutoAWQ int4 checkpoints (FORMATS.md §2): the one place that knows their packing. Decodes the
// GEMM (§2.3) and GEMV (§2.4) layouts of a linear layer's qweight / qzeros / scales into the
// canonical Int4Matrix (core/quantized.h) that every backend packs its own way.
#pragma once

#include <cstdint>
#include <string>

#include "core/quantized.h"
#include "core/tensor.h"

namespace perfx {

/// AWQ_ORDER: nibble i of a GEMM word holds output column 8c + kAwqOrder[i] (FORMATS.md §2.3).
inline constexpr int kAwqOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
/// AWQ_REVERSE_ORDER: output column 8c + r of a GEMM word lives in nibble kAwqReverseOrder[r].
inline constexpr int kAwqReverseOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/// Width in int32 words of a GEMV qzeros row: ceil(G/8), rounded up to a multiple of 2 for g = 64
/// and of 4 for g = 32 (AutoAWQ gemv.py calculate_zeros_width; FORMATS.md §2.2). Throws
/// perfx::Error for other group sizes below 128.
int64_t awq_gemv_zeros_width(int64_t in, int group_size);

/// The tensors of one AutoAWQ linear as found in a checkpoint.
struct AwqTensors {
  TensorView qweight, qzeros, scales;
  std::string version;   // "gemm" | "gemv" (any case)
  int group_size = 128;  // <= 0: one group per row (AutoAWQ's −1)
  int64_t out = 0, in = 0;
};

/// Decodes an AutoAWQ linear into the canonical form. qweight / qzeros: I32 (GEMM: [in, out/8] and
/// [G, out/8]; GEMV: [out, in/8] and [out, ZW]); scales F16 (or BF16, converted exactly when in the
/// fp16 range; GEMM [G, out], GEMV [out, ZW·8]). Tensors may be unaligned. Afterwards the pages
/// wholly inside the source tensors are advised out (MADV_PAGEOUT; non-destructive), so a mmapped
/// checkpoint does not stay resident beside the decoded copy.
/// Throws perfx::Error naming the tensor for a missing tensor, a wrong dtype or shape, a truncated
/// tensor, in % group_size != 0, group_size % 8 != 0, out % 8 != 0 (GEMM) or an unknown version.
Int4Matrix decode_awq(const AwqTensors& t);

}  // namespace perfx
