// The quantize driver: layer by layer (FORMATS.md §1.9), AWQ or RTN, written as an AutoAWQ GEMM
// checkpoint (FORMATS.md §2.1–§2.3).
#include "quant/quantize.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/cpu/reference.h"
#include "core/mmap.h"
#include "core/thread_pool.h"
#include "formats/gguf.h"
#include "model/weights.h"
#include "perfx/status.h"
#include "quant/calib.h"
#include "quant/checkpoint_writer.h"
#include "quant/int4.h"
#include "quant/layer_runner.h"
#include "quant/progress.h"

namespace perfx::quant {
namespace {

namespace fs = std::filesystem;

/// A whole tensor as fp32 (F32/F16/BF16 and GGUF's Q8_0/Q4_0/Q4_1 through the reference
/// dequantizer); rows along the last dimension. The source pages are released afterwards.
std::vector<float> to_f32(const TensorView& t) {
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = cols ? t.numel() / cols : 0;
  check(is_weight_dtype(t.dtype),
        "quantize: tensor '" + t.name + "' has unsupported dtype " + dtype_name(t.dtype));
  std::vector<float> v(static_cast<size_t>(t.numel()));
  const size_t row_bytes = dtype_row_bytes(t.dtype, cols);
  for (int64_t r = 0; r < rows; ++r)
    cpu::dequantize_row(t.dtype, static_cast<const uint8_t*>(t.data) + r * row_bytes,
                        v.data() + r * cols, cols);
  release_pages(t.data, t.nbytes);
  return v;
}

/// GGUF 'llama' arch stores q/k rows permuted for interleaved RoPE (FORMATS.md §4.3): GGUF row
/// h·d + 2i + j holds HF row h·d + j·d/2 + i. Undo it (rows and bias).
void unpermute_rows(LinearF32& L, int64_t heads, int64_t d) {
  auto fix = [&](std::vector<float>& v, int64_t cols) {
    std::vector<float> out(v.size());
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < d / 2; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          const int64_t src = h * d + 2 * i + j, dst = h * d + j * d / 2 + i;
          std::copy_n(v.begin() + src * cols, cols, out.begin() + dst * cols);
        }
    v = std::move(out);
  };
  fix(L.w, L.in);
  if (!L.bias.empty()) fix(L.bias, 1);
}

struct Loader {
  const Checkpoint& ck;
  const ModelConfig& cfg;
  bool gguf_permuted;

  LinearF32 linear(int layer, LayerTensor t, int64_t out, int64_t in, bool bias) const {
    const std::string src = layer_tensor_base(ck.naming, layer, t);
    LinearF32 L;
    L.name = layer_tensor_base(TensorNaming::HuggingFace, layer, t);
    L.out = out;
    L.in = in;
    const TensorView& w = require_tensor(ck, src + ".weight");
    check(w.shape.size() == 2 && w.shape[0] == out && w.shape[1] == in,
          "tensor '" + w.name + "' has shape " + w.shape_str() + ", expected [" +
              std::to_string(out) + ", " + std::to_string(in) + "]");
    L.w = to_f32(w);
    if (bias) L.bias = to_f32(require_vector(ck, src + ".bias", out));
    return L;
  }
  std::vector<float> vec(int layer, LayerTensor t, int64_t n) const {
    return to_f32(require_vector(ck, layer_tensor_base(ck.naming, layer, t) + ".weight", n));
  }
  DecoderLayerF32 layer(int l) const {
    const int64_t H = cfg.hidden_size, I = cfg.intermediate_size, qd = cfg.q_dim(),
                  kvd = cfg.kv_dim();
    DecoderLayerF32 L;
    L.attn_norm = vec(l, LayerTensor::AttnNorm, H);
    L.ffn_norm = vec(l, LayerTensor::FfnNorm, H);
    if (cfg.qk_norm) {
      L.q_norm = vec(l, LayerTensor::QNorm, cfg.head_dim);
      L.k_norm = vec(l, LayerTensor::KNorm, cfg.head_dim);
    }
    L.q = linear(l, LayerTensor::Q, qd, H, cfg.qkv_bias);
    L.k = linear(l, LayerTensor::K, kvd, H, cfg.qkv_bias);
    L.v = linear(l, LayerTensor::V, kvd, H, cfg.qkv_bias);
    L.o = linear(l, LayerTensor::O, H, qd, cfg.o_bias);
    L.gate = linear(l, LayerTensor::Gate, I, H, cfg.mlp_bias);
    L.up = linear(l, LayerTensor::Up, I, H, cfg.mlp_bias);
    L.down = linear(l, LayerTensor::Down, H, I, cfg.mlp_bias);
    if (gguf_permuted) {
      unpermute_rows(L.q, cfg.num_attention_heads, cfg.head_dim);
      unpermute_rows(L.k, cfg.num_key_value_heads, cfg.head_dim);
    }
    return L;
  }
};

/// Writes one linear: qweight/qzeros/scales (GEMM layout) or, when kept in fp16, weight; + bias.
void emit_linear(ShardedWriter& wr, const LinearF32& L, const QuantizeOptions& o,
                 QuantizeSummary& sum) {
  if (L.quantize) {
    const QuantizedMatrix q = quantize_fp16(L.w.data(), L.out, L.in, o.group_size, o.w_bit);
    const GemmTensors g = pack_gemm(q);
    const int64_t G = L.in / o.group_size;
    wr.add(i32_tensor(L.name + ".qweight", g.qweight, {L.in, L.out / 8}));
    wr.add(i32_tensor(L.name + ".qzeros", g.qzeros, {G, L.out / 8}));
    wr.add(f16_bits_tensor(L.name + ".scales", g.scales, {G, L.out}));
    ++sum.n_linears_quantized;
  } else {
    wr.add(f16_tensor(L.name + ".weight", L.w.data(), {L.out, L.in}));
  }
  if (!L.bias.empty()) wr.add(f16_tensor(L.name + ".bias", L.bias.data(), {L.out}));
}

/// config.json for a GGUF input (the keys of FORMATS.md §5.1 that ModelConfig holds).
std::string hf_config_from(const ModelConfig& c) {
  nlohmann::ordered_json j;
  const std::string arch = c.model_type == "qwen2"     ? "Qwen2ForCausalLM"
                           : c.model_type == "qwen3"   ? "Qwen3ForCausalLM"
                           : c.model_type == "mistral" ? "MistralForCausalLM"
                                                       : "LlamaForCausalLM";
  j["architectures"] = {arch};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling.type == RopeScaling::Type::Linear) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
  } else if (c.rope_scaling.type == RopeScaling::Type::Llama3) {
    j["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_scaling.factor},
        {"low_freq_factor", c.rope_scaling.low_freq_factor},
        {"high_freq_factor", c.rope_scaling.high_freq_factor},
        {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.model_type == "llama") j["attention_bias"] = c.qkv_bias;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  j["torch_dtype"] = "float16";
  return j.dump(2);
}

// The checkpoint is written into a hidden staging folder and moved into place when complete, so
// a failure (disk full, an error) never leaves a partial checkpoint under the output name; the
// destructor removes the staging folder unless committed. A kill -9 leaves the hidden folder
// (".NAME.partial-XXXXXX" or "OUT/.perfx-partial-XXXXXX"), never a partial OUT.
//  - OUT does not exist: staging is a mkdtemp folder beside it, renamed to OUT at the end.
//  - OUT is an existing empty folder (a mount point, a symlink to a folder, ".", a folder whose
//    parent is read-only): staging is a mkdtemp folder inside it (same filesystem), and each
//    entry is renamed up into OUT at the end; OUT itself (owner, mode, ACLs) is kept.
class StagingDir {
 public:
  explicit StagingDir(const std::string& out_arg) {
    check(!out_arg.empty(), "-o: no output folder given");
    fs::path out = fs::path(out_arg).lexically_normal();
    if (!out.has_filename() && out.has_parent_path() && out != out.root_path())
      out = out.parent_path();  // "OUT/"
    std::error_code ec;
    if (fs::exists(out, ec)) {  // follows a symlink
      check(fs::is_directory(out, ec), "-o: '" + out_arg + "' exists and is not a folder");
      check(fs::is_empty(out, ec), "-o: output folder '" + out_arg + "' exists and is not empty");
      inside_ = true;
      final_ = out.string();
      dir_ = make_temp(out / ".perfx-partial-XXXXXX", out_arg);
      return;
    }
    const std::string name = out.filename().string();
    check(!name.empty() && name != "." && name != "..",
          "-o: '" + out_arg + "' does not name a folder");
    fs::path parent = out.parent_path();
    if (parent.empty()) parent = ".";
    if (!fs::exists(parent, ec)) {
      fs::create_directories(parent, ec);
      check(!ec, "-o: cannot create '" + parent.string() + "': " + ec.message());
    }
    final_ = out.string();
    dir_ = make_temp(parent / ("." + name + ".partial-XXXXXX"), out_arg);
  }
  ~StagingDir() {
    if (committed_) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;

  /// Where to write.
  const std::string& dir() const { return dir_; }
  /// Moves the staged files to the output name. Throws perfx::Error naming both paths (and
  /// removes what it had moved) when a rename fails.
  void commit() {
    std::error_code ec;
    if (!inside_) {
      fs::rename(dir_, final_, ec);
      check(!ec, "cannot rename '" + dir_ + "' to '" + final_ + "': " + ec.message());
      committed_ = true;
      return;
    }
    std::vector<fs::path> moved;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const fs::path to = fs::path(final_) / e.path().filename();
      fs::rename(e.path(), to, ec);
      if (ec) {
        const std::string why = ec.message();
        for (const auto& m : moved) fs::remove_all(m, ec);
        throw Error("cannot move '" + e.path().string() + "' to '" + to.string() + "': " + why);
      }
      moved.push_back(to);
    }
    fs::remove(dir_, ec);
    committed_ = true;
  }

 private:
  static std::string make_temp(const fs::path& pattern, const std::string& out_arg) {
    std::string buf = pattern.string();
    check(::mkdtemp(buf.data()) != nullptr,
          "-o '" + out_arg + "': cannot create the staging folder '" + pattern.string() +
              "': " + std::strerror(errno));
    return buf;
  }
  std::string dir_, final_;
  bool inside_ = false, committed_ = false;
};

// Quantizes and writes every output file into `out_dir` (the staging folder).
QuantizeSummary write_quantized(const QuantizeOptions& o, const Checkpoint& ck,
                                const ModelConfig& cfg_in, const Loader& load, bool awq,
                                std::string calib_path, bool pretokenized,
                                const std::string& out_dir);

}  // namespace

DecoderLayerF32 load_decoder_layer(const Checkpoint& ck, int layer) {
  const bool permuted = ck.naming == TensorNaming::Gguf && ck.config.rope_interleaved;
  return Loader{ck, ck.config, permuted}.layer(layer);
}

QuantizeSummary quantize_model(const QuantizeOptions& o) {
  const auto t_start = std::chrono::steady_clock::now();
  check(o.method == "awq" || o.method == "rtn",
        "--method must be awq or rtn, got '" + o.method + "'");
  check(o.w_bit == 4,
        "--w-bit: only 4-bit is supported (AutoAWQ GEMM packing), got " + std::to_string(o.w_bit));
  check(o.group_size > 0 && o.group_size % 8 == 0,
        "--group-size must be a positive multiple of 8, got " + std::to_string(o.group_size));
  const bool awq = o.method == "awq";
  std::string calib_path = o.calib_path;
  const bool pretokenized = !o.calib_tokens.empty();
  if (awq && pretokenized) {
    check(o.calib_tokens_seq_len > 0 &&
              o.calib_tokens.size() % static_cast<size_t>(o.calib_tokens_seq_len) == 0,
          "quantize: calib_tokens must hold whole blocks of calib_tokens_seq_len tokens");
  } else if (awq) {
    check(o.tokenizer != nullptr, "quantize: AWQ needs the model's tokenizer");
    if (calib_path.empty()) {
      calib_path = o.input + "/calib.txt";
      check(is_directory(o.input) && path_exists(calib_path),
            "--calib FILE.txt is required for --method awq (no calib.txt in the model folder)");
    }
    check(path_exists(calib_path), "--calib: '" + calib_path + "' does not exist");
  }

  Checkpoint ck = open_checkpoint(o.input);
  check(!ck.config.quant.enabled,
        "quantize: '" + o.input + "' is already quantized (quantization_config present)");
  ModelConfig cfg = ck.config;
  const bool gguf_permuted = ck.naming == TensorNaming::Gguf && cfg.rope_interleaved;
  cfg.rope_interleaved = false;  // weights are un-permuted to the HF layout below
  const Loader load{ck, cfg, gguf_permuted};
  {
    // A linear is quantized when its input width is a multiple of the group size and its output
    // width a multiple of 8 (the packing); a model where none is would be an fp16 copy labelled AWQ.
    const int64_t widths[][2] = {{cfg.q_dim(), cfg.hidden_size},
                                 {cfg.kv_dim(), cfg.hidden_size},
                                 {cfg.hidden_size, cfg.q_dim()},
                                 {cfg.intermediate_size, cfg.hidden_size},
                                 {cfg.hidden_size, cfg.intermediate_size}};
    bool any = false;
    for (const auto& w : widths) any |= w[1] % o.group_size == 0 && w[0] % 8 == 0;
    check(any, "quantize: no linear layer of this model can be quantized with --group-size " +
                   std::to_string(o.group_size) + " (input widths " +
                   std::to_string(cfg.hidden_size) + ", " + std::to_string(cfg.q_dim()) + ", " +
                   std::to_string(cfg.intermediate_size) +
                   " must be multiples of it, output widths multiples of 8); nothing written");
  }
  StagingDir staging(o.output);
  try {
    QuantizeSummary sum = write_quantized(o, ck, cfg, load, awq, calib_path, pretokenized,
                                          staging.dir());
    staging.commit();
    sum.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    return sum;
  } catch (const std::exception& e) {  // perfx::Error, and also bad_alloc or filesystem_error
    throw Error("quantize: '" + o.output + "' was not written (the partial output was removed): " +
                e.what());
  }
}

namespace {

QuantizeSummary write_quantized(const QuantizeOptions& o, const Checkpoint& ck,
                                const ModelConfig& cfg_in, const Loader& load, bool awq,
                                std::string calib_path, bool pretokenized,
                                const std::string& out_dir) {
  ModelConfig cfg = cfg_in;
  QuantizeSummary sum;
  sum.n_layers = static_cast<int>(cfg.num_hidden_layers);
  ShardedWriter wr(out_dir, o.max_shard_bytes);
  const int64_t H = cfg.hidden_size, V = cfg.vocab_size;

  // Non-layer tensors: fp16 (FORMATS.md §1.8: embed_tokens, final norm and lm_head stay fp16).
  const TensorView& emb_view = require_tensor(ck, embed_name(ck.naming));
  check(emb_view.shape.size() == 2 && emb_view.shape[0] == V && emb_view.shape[1] == H,
        "tensor '" + emb_view.name + "' has shape " + emb_view.shape_str());
  {
    const std::vector<float> e = to_f32(emb_view);
    wr.add(f16_tensor("model.embed_tokens.weight", e.data(), {V, H}));
  }

  ThreadPool pool(o.n_threads);
  std::unique_ptr<Backend> backend;
  std::unique_ptr<ModelLayerRunner> runner;
  Matrix x;  // calibration hidden states entering the current layer
  AwqOptions ao;
  ao.w_bit = o.w_bit;
  ao.group_size = o.group_size;
  ao.duo_scaling = o.duo_scaling;
  ao.clip = o.clip;
  ao.pool = &pool;
  if (awq) {
    CalibBlocks cb;
    if (pretokenized) {
      cb.seq_len = o.calib_tokens_seq_len;
      cb.n_blocks = static_cast<int>(o.calib_tokens.size() / static_cast<size_t>(cb.seq_len));
      cb.tokens = o.calib_tokens;
      calib_path = "<tokens>";
    } else {
      cb = make_calib_blocks(read_text_file(calib_path), *o.tokenizer, o.n_samples, o.seq_len);
    }
    sum.calib_blocks = cb.n_blocks;
    sum.calib_seq_len = cb.seq_len;
    sum.calib_samples = cb.n_samples;
    if (o.progress)
      std::fprintf(stderr,
                   "quantize: AWQ calibration on %d samples of %s -> %d blocks of %d tokens "
                   "(%d samples longer than %d skipped, %lld tokens dropped)\n",
                   cb.n_samples, calib_path.c_str(), cb.n_blocks, cb.seq_len, cb.n_skipped_long,
                   cb.seq_len, static_cast<long long>(cb.n_dropped));
    x = Matrix(static_cast<int64_t>(cb.tokens.size()), H);
    const size_t row_bytes = dtype_row_bytes(emb_view.dtype, H);
    for (size_t t = 0; t < cb.tokens.size(); ++t) {
      const int32_t id = cb.tokens[t];
      if (id < 0 || id >= V)
        throw Error("calibration token id " + std::to_string(id) + " out of range");
      cpu::dequantize_row(emb_view.dtype,
                          static_cast<const uint8_t*>(emb_view.data) + id * row_bytes,
                          x.row(static_cast<int64_t>(t)), H);
    }
    backend = create_backend("cpu", o.n_threads);
    runner = std::make_unique<ModelLayerRunner>(cfg, *backend, cb.n_blocks, cb.seq_len, &pool);
  }

  ProgressBar bar(awq ? "quantize (awq): layer" : "quantize (rtn): layer", sum.n_layers,
                  o.progress ? stderr : nullptr);
  bar.update(0);
  for (int l = 0; l < sum.n_layers; ++l) {
    DecoderLayerF32 L = load.layer(l);
    for (LinearF32* lin : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      lin->quantize = lin->in % o.group_size == 0 && lin->out % 8 == 0;
      if (!lin->quantize) sum.not_converted.push_back(lin->name);
    }
    if (awq) {
      bar.update(l, "layer " + std::to_string(l) + ": capture");
      runner->set_input(&x);
      LayerInputs X;
      Matrix x_next;
      runner->capture(L, X, x_next);
      bar.update(l, "layer " + std::to_string(l) + ": scale + clip search");
      AwqLayerReport rep;
      awq_layer(L, X, *runner, ao, &rep);
      sum.layer_reports.push_back(rep);
      x = std::move(x_next);
    }
    bar.update(l, "layer " + std::to_string(l) + ": pack");
    const std::string p = "model.layers." + std::to_string(l) + ".";
    wr.add(f16_tensor(p + "input_layernorm.weight", L.attn_norm.data(), {H}));
    wr.add(f16_tensor(p + "post_attention_layernorm.weight", L.ffn_norm.data(), {H}));
    if (!L.q_norm.empty()) {
      wr.add(f16_tensor(p + "self_attn.q_norm.weight", L.q_norm.data(), {cfg.head_dim}));
      wr.add(f16_tensor(p + "self_attn.k_norm.weight", L.k_norm.data(), {cfg.head_dim}));
    }
    for (const LinearF32* lin : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down})
      emit_linear(wr, *lin, o, sum);
    bar.update(l + 1);
  }
  bar.finish();

  {
    const std::vector<float> n = to_f32(require_vector(ck, final_norm_name(ck.naming), H));
    wr.add(f16_tensor("model.norm.weight", n.data(), {H}));
  }
  if (const TensorView* head = find_tensor(ck, lm_head_name(ck.naming))) {
    check(head->shape.size() == 2 && head->shape[0] == V && head->shape[1] == H,
          "tensor '" + head->name + "' has shape " + head->shape_str());
    const std::vector<float> h = to_f32(*head);
    wr.add(f16_tensor("lm_head.weight", h.data(), {V, H}));
  } else {
    cfg.tie_word_embeddings = true;
  }
  wr.finish();
  sum.files = wr.files();
  sum.output_bytes = wr.total_bytes();

  AwqConfigJson qc;
  qc.bits = o.w_bit;
  qc.group_size = o.group_size;
  qc.modules_to_not_convert = sum.not_converted;
  const std::string in_cfg = ck.naming == TensorNaming::HuggingFace
                                 ? read_text_file(o.input + "/config.json")
                                 : hf_config_from(cfg);
  write_text_file(out_dir + "/config.json", awq_config_json(in_cfg, qc));
  sum.files.push_back("config.json");
  if (ck.naming == TensorNaming::HuggingFace) {
    for (const std::string& f : copy_tokenizer_files(o.input, out_dir)) sum.files.push_back(f);
  } else {
    // A GGUF's tokenizer lives in its metadata: keep it, as a tokenizer-only GGUF that
    // Tokenizer::from_hf_dir reads when the folder has no tokenizer.json.
    std::map<std::string, gguf::Value> kv;
    for (const auto& [key, value] : static_cast<const gguf::File*>(ck.gguf)->metadata())
      if (key.rfind("tokenizer.", 0) == 0) kv.emplace(key, value);
    if (!kv.empty()) {
      gguf::write_metadata_only(out_dir + "/tokenizer.gguf", kv);
      sum.files.push_back("tokenizer.gguf");
    }
  }
  return sum;
}

}  // namespace
}  // namespace perfx::quant
