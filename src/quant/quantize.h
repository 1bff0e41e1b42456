// `perfx quantize`: an fp16/bf16/fp32 Llama-family checkpoint -> an AutoAWQ GEMM-format int4
// checkpoint (W4A16, asymmetric, per-group scale + zero), by AWQ (FORMATS.md §1) or plain
// round-to-nearest (RTN: the same quantizer without scale search or clipping).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/awq.h"

namespace perfx {
class Tokenizer;
struct Checkpoint;
}  // namespace perfx

namespace perfx::quant {

struct QuantizeOptions {
  std::string input;   // HF checkpoint folder, or a GGUF file with F32/F16/BF16 (or Q8_0) weights
  std::string output;  // folder to create (must not exist or be empty)
  std::string method = "awq";  // "awq" | "rtn"
  int w_bit = 4;               // only 4 (AutoAWQ GEMM packing)
  int group_size = 128;        // > 0, multiple of 8
  // AWQ calibration (FORMATS.md §1.2)
  std::string calib_path;  // text file, one sample per non-empty line; "" = <input>/calib.txt
  int n_samples = 128;
  int seq_len = 512;
  const Tokenizer* tokenizer = nullptr;  // required for awq unless calib_tokens is set
  /// Pre-tokenized calibration blocks (n_blocks × seq_len ids); when non-empty, used instead of
  /// the text, the tokenizer, n_samples and seq_len.
  std::vector<int32_t> calib_tokens;
  int calib_tokens_seq_len = 0;
  bool duo_scaling = true;
  bool clip = true;
  int n_threads = 0;  // <= 0: all cores
  /// A shard is written when this many bytes of output are pending (bounds memory; several
  /// shards get the HF index).
  size_t max_shard_bytes = size_t(512) << 20;
  bool progress = true;  // progress bar on stderr
};

struct QuantizeSummary {
  int n_layers = 0;
  int64_t n_linears_quantized = 0;
  std::vector<std::string> not_converted;  // modules kept in fp16 (modules_to_not_convert)
  int calib_blocks = 0, calib_seq_len = 0, calib_samples = 0;
  std::vector<AwqLayerReport> layer_reports;  // AWQ only
  size_t output_bytes = 0;                    // tensor bytes written
  std::vector<std::string> files;             // files written into the output folder
  double seconds = 0;
};

/// Runs the quantization (FORMATS.md §1.9 per layer: capture inputs from the fp model, search and
/// fold scales, clip, quantize with fp16 arithmetic, pack in the GEMM layout) and writes the
/// output folder: model.safetensors (or shards + index), config.json with quantization_config,
/// tokenizer files. Kept in fp16: embed_tokens, norms, lm_head, and every linear whose
/// in_features is not a multiple of group_size or out_features not a multiple of 8 (listed in
/// modules_to_not_convert; a documented choice instead of an error). Memory: one layer in fp32
/// plus its captured inputs, on top of the mmapped input.
/// Throws perfx::Error for bad options (naming the flag), an already quantized input, a GGUF input
/// with unsupported tensor types, unreadable/unwritable paths, or too little calibration text.
QuantizeSummary quantize_model(const QuantizeOptions& o);

/// Decoder layer `layer` of a dense checkpoint as host fp32 with HF module names (GGUF 'llama'
/// q/k rows un-permuted to the HF half-split layout, FORMATS.md §4.3). Throws perfx::Error for
/// missing tensors, wrong shapes or unsupported dtypes.
DecoderLayerF32 load_decoder_layer(const Checkpoint& ck, int layer);

}  // namespace perfx::quant
