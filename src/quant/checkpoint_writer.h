// Writing an AutoAWQ-format checkpoint folder (FORMATS.md §2.1–§2.2, §3): safetensors shards
// written as tensors are produced (so only the pending shard is held in memory), the sharded
// index, config.json with quantization_config, and the tokenizer files copied from the input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace perfx::quant {

/// A tensor that owns its bytes (little-endian, row-major).
struct OwnedTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  TensorView view() const;
};

/// fp32 values rounded to fp16 (round to nearest even), shape as given.
OwnedTensor f16_tensor(const std::string& name, const float* data, std::vector<int64_t> shape);
/// Raw fp16 bits.
OwnedTensor f16_bits_tensor(const std::string& name, const std::vector<uint16_t>& bits,
                            std::vector<int64_t> shape);
OwnedTensor i32_tensor(const std::string& name, const std::vector<int32_t>& v,
                       std::vector<int64_t> shape);

/// Writes tensors into `dir` as safetensors shards of about `max_shard_bytes` (a shard is written
/// as soon as its pending tensors reach the limit). finish() names a single shard
/// model.safetensors, several model-0000i-of-0000n.safetensors plus model.safetensors.index.json
/// (HF layout, FORMATS.md §3). Inside a shard tensors are ordered by element size (largest first)
/// then name, so every tensor is naturally aligned. Throws perfx::Error on I/O failure or a
/// duplicate name.
class ShardedWriter {
 public:
  ShardedWriter(std::string dir, size_t max_shard_bytes);
  void add(OwnedTensor t);
  void finish();
  /// Bytes of tensor data added so far.
  size_t total_bytes() const { return total_; }
  /// Names of the shard files written by finish().
  const std::vector<std::string>& files() const { return final_names_; }

 private:
  void flush();

  std::string dir_;
  size_t max_shard_bytes_;
  std::vector<OwnedTensor> pending_;
  size_t pending_bytes_ = 0, total_ = 0;
  std::vector<std::string> tmp_names_, final_names_;
  std::vector<std::vector<std::string>> shard_tensors_;
  std::vector<std::string> all_names_;
  bool finished_ = false;
};

/// AWQ quantization_config values written to config.json (FORMATS.md §2.1).
struct AwqConfigJson {
  int bits = 4;
  int group_size = 128;
  std::string version = "gemm";
  std::vector<std::string> modules_to_not_convert;  // written as null when empty
};

/// config.json of the quantized model: the input's config.json text with "quantization_config"
/// set, "torch_dtype" (and "dtype" when present) set to "float16"; other keys kept in order.
/// Throws perfx::Error when the text is not a JSON object.
std::string awq_config_json(const std::string& input_config_json, const AwqConfigJson& q);

/// Copies the tokenizer / generation files that exist in `src_dir` (tokenizer.json,
/// tokenizer_config.json, tokenizer.model, special_tokens_map.json, generation_config.json,
/// chat_template.jinja, vocab.json, merges.txt, added_tokens.json) into `dst_dir`.
/// Returns the names copied.
std::vector<std::string> copy_tokenizer_files(const std::string& src_dir,
                                              const std::string& dst_dir);

/// Writes `text` to `path` (via a temporary file and rename). Throws perfx::Error on failure.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace perfx::quant
