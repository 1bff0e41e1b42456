// Prefill attention (q_len > 1, chunked prefill, mixed batches): the tile kernel of attn_tile.cuh
// with 4 warps x 16 rows = 64 query rows per CTA, each warp taking all 64 keys of a tile
// (FlashAttention-2 layout, Dao 2023, arXiv 2307.08691). Rows are (token, group head) pairs, so a
// CTA covers 64 / group tokens and reads each K/V tile once for the whole GQA group.
#include <type_traits>

#include "backend/cuda/attn_tile.cuh"
// (No PERFX_TRACE_BINDER here: the trace covers the decode step, so the prefill instances of the
// instrumented tile kernel find their ring pointer null and record nothing.)

namespace perfx::cuda::attn_detail {

namespace {

constexpr int kWM = 4, kWN = 1;
static_assert(16 * kWM == kPrefillRows, "prefill rows per CTA");

template <typename T, int D>
void set_attr_one() {
  using C = TileCfg<D, kWM, kWN>;
  ATTN_CUDA_CHECK(cudaFuncSetAttribute(attn_tile_kernel<T, D, kWM, kWN, false>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(C::kSmemBytes)));
  if constexpr (D % 32 == 0)  // the q8_0-cache variant
    ATTN_CUDA_CHECK(cudaFuncSetAttribute(attn_tile_kernel<T, D, kWM, kWN, false, true>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(C::kSmemBytes)));
}

template <typename T>
void set_attr_all() {
  set_attr_one<T, 64>();
  set_attr_one<T, 80>();
  set_attr_one<T, 96>();
  set_attr_one<T, 128>();
}

template <typename T, int D>
void launch_one(const TileArgs& args, dim3 grid, cudaStream_t stream) {
  using C = TileCfg<D, kWM, kWN>;
  auto* k = attn_tile_kernel<T, D, kWM, kWN, false>;
  if constexpr (D % 32 == 0) {
    if (args.k_scale) k = attn_tile_kernel<T, D, kWM, kWN, false, true>;
  } else {
    require(!args.k_scale, "paged_attention: a q8_0 KV cache needs head_dim 64, 96 or 128");
  }
  launch_pdl(k, grid, dim3(kThreads), C::kSmemBytes, stream, args);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void launch_typed(int head_dim, const TileArgs& args, dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      return launch_one<T, 64>(args, grid, stream);
    case 80:
      return launch_one<T, 80>(args, grid, stream);
    case 96:
      return launch_one<T, 96>(args, grid, stream);
    case 128:
      return launch_one<T, 128>(args, grid, stream);
    default:
      require(false, "paged_attention: unsupported head_dim " + std::to_string(head_dim));
  }
}

}  // namespace

void prefill_set_attributes() {
  set_attr_all<__half>();
  set_attr_all<__nv_bfloat16>();
}

void launch_prefill(AttnDtype dtype, int head_dim, const TileArgs& args, int n_row_tiles,
                    int n_kv_heads, int n_seqs, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(n_row_tiles), static_cast<unsigned>(n_kv_heads),
                  static_cast<unsigned>(n_seqs));
  if (dtype == AttnDtype::kF16)
    launch_typed<__half>(head_dim, args, grid, stream);
  else
    launch_typed<__nv_bfloat16>(head_dim, args, grid, stream);
}

}  // namespace perfx::cuda::attn_detail
