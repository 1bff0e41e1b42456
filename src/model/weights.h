// Finding a Llama-family model's tensors in a checkpoint (HF safetensors names or GGUF names, dense
// or AutoAWQ int4) and describing them as backend LinearSources.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/tensor.h"
#include "perfx/model_config.h"

namespace perfx {
namespace gguf {
class File;
}

/// Which naming scheme the checkpoint uses.
enum class TensorNaming { HuggingFace, Gguf };

/// Per-layer tensors of the Llama family.
enum class LayerTensor { AttnNorm, Q, K, V, O, QNorm, KNorm, FfnNorm, Gate, Up, Down };

/// A checkpoint opened for loading: the tensor source, its naming and the model config.
struct Checkpoint {
  std::unique_ptr<TensorSource> source;
  TensorNaming naming = TensorNaming::HuggingFace;
  ModelConfig config;
  std::string path;
  /// The GGUF file when naming == Gguf (for the tokenizer); owned by `source`.
  const gguf::File* gguf = nullptr;
};

/// Opens a HF checkpoint folder (config.json + safetensors), a .gguf file, or a synthetic
/// "random:SHAPE[:FORMAT]" checkpoint (model/synthetic.h).
/// Throws perfx::Error: path missing, neither a folder with config.json nor a GGUF file, or the
/// errors of the format readers.
Checkpoint open_checkpoint(const std::string& path);

/// For a model path that is a file (not a folder): throws perfx::Error "model file 'PATH' is not a
/// GGUF file (bad magic ...) and not a Hugging Face model folder" unless it starts with GGUF's
/// magic, or when it cannot be read.
void check_gguf_magic(const std::string& path);

/// Base name (without .weight/.qweight) of a layer tensor, e.g. "model.layers.3.self_attn.q_proj".
std::string layer_tensor_base(TensorNaming n, int layer, LayerTensor t);
std::string embed_name(TensorNaming n);
std::string final_norm_name(TensorNaming n);
std::string lm_head_name(TensorNaming n);

/// Compares the layers the checkpoint's tensors belong to ("model.layers.N." / "blk.N.", GGUF
/// tensors of unsupported types included) with the configured layer count, before anything is
/// allocated for the layers. Throws perfx::Error "checkpoint PATH has layer N's tensors (e.g.
/// 'NAME') but config says num_hidden_layers = N" (GGUF: "its metadata says ARCH.block_count = N")
/// when a tensor belongs to a layer past the count (llama.cpp refuses such files too), and
/// "missing tensor '<layer N-1's input norm>' in PATH: config says num_hidden_layers = N but the
/// checkpoint's last layer is M" when the last configured layer has no tensors (a count far beyond
/// the checkpoint). Tensors outside the layers are not checked.
void check_layer_count(const Checkpoint& ck);

/// The tensor `name`, or nullptr when the checkpoint has no tensor of that name. Throws
/// perfx::Error (gguf::unsupported_type_error: the name and its ggml type) when a GGUF holds it in
/// a type this engine does not load, so an optional tensor (output.weight) is never skipped for
/// its type.
const TensorView* find_tensor(const Checkpoint& ck, const std::string& name);
/// The tensor `name`; throws perfx::Error "missing tensor 'name' in <path>" when absent, or the
/// find_tensor() error when it has an unsupported GGUF type.
const TensorView& require_tensor(const Checkpoint& ck, const std::string& name);
/// A 1-D tensor with `n` elements (norm weight, bias); shape checked.
const TensorView& require_vector(const Checkpoint& ck, const std::string& name, int64_t n);

/// Describes linear `base` with expected [out, in]: AWQ (base.qweight/qzeros/scales, decoded here
/// into the canonical Int4Matrix by formats/awq.h) when the config is AWQ-quantized and the module
/// is not in modules_to_not_convert, else dense base.weight. Shapes are checked; a mismatch is a
/// perfx::Error naming the tensor and both shapes. An AWQ module without base.qweight is a
/// perfx::Error naming it (even when base.weight exists).
LinearSource linear_source(const Checkpoint& ck, const std::string& base, int64_t out, int64_t in);

}  // namespace perfx
