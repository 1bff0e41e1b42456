#include "model/weights.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "core/mmap.h"
#include "formats/awq.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "model/synthetic.h"
#include "perfx/status.h"

namespace perfx {

void check_gguf_magic(const std::string& path) {
  unsigned char m[4] = {0, 0, 0, 0};
  std::FILE* f = std::fopen(path.c_str(), "rb");
  check(f != nullptr, "cannot open model file '" + path + "': " + std::strerror(errno));
  const size_t n = std::fread(m, 1, 4, f);
  std::fclose(f);
  if (n == 4 && std::memcmp(m, "GGUF", 4) == 0) return;
  std::string text, hex;  // e.g. 'PK..' (50 4b 03 04)
  for (size_t i = 0; i < n; ++i) {
    char h[4];
    std::snprintf(h, sizeof h, i ? " %02x" : "%02x", m[i]);
    hex += h;
    text += (m[i] >= 0x20 && m[i] < 0x7f) ? (char)m[i] : '.';
  }
  std::string msg = "model file '" + path + "' is not a GGUF file (" +
                    (n ? "bad magic '" + text + "' (" + hex + "), expected 'GGUF'"
                       : std::string("the file is empty")) +
                    ") and not a Hugging Face model folder";
  const std::string ext = ".safetensors";
  if (path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    msg += "; give the folder that holds it and its config.json";
  throw Error(msg);
}

namespace {

/// For a folder without config.json: "; it holds DIR/a.gguf: give that file" when GGUF files sit
/// in it (up to three named, sorted), else "".
std::string gguf_hint(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".gguf") found.push_back(it->path().string());
  if (found.empty()) return "";
  std::sort(found.begin(), found.end());
  std::string list = found[0];
  for (size_t i = 1; i < found.size() && i < 3; ++i) list += ", " + found[i];
  if (found.size() > 3) list += " and " + std::to_string(found.size() - 3) + " more";
  return "; it holds " + list + (found.size() == 1 ? ": give that file" : ": give one of them");
}

}  // namespace

Checkpoint open_checkpoint(const std::string& path) {
  check(!path.empty(), "no model path given");
  if (is_synthetic_path(path)) return synthetic_checkpoint(path);
  check(path_exists(path), "model path '" + path + "' does not exist");
  Checkpoint ck;
  ck.path = path;
  if (is_directory(path)) {
    if (!path_exists(path + "/config.json"))  // the hint lists the folder: only on the error
      throw Error("model folder '" + path +
                  "' has no config.json (expected a Hugging Face checkpoint)" + gguf_hint(path));
    ck.config = load_hf_config(path);
    ck.source = SafetensorsFolder::open(path);
    ck.naming = TensorNaming::HuggingFace;
    return ck;
  }
  check_gguf_magic(path);
  auto g = gguf::File::open(path);
  ck.config = config_from_gguf(*g);
  ck.gguf = g.get();
  ck.source = std::move(g);
  ck.naming = TensorNaming::Gguf;
  return ck;
}

std::string layer_tensor_base(TensorNaming n, int layer, LayerTensor t) {
  const std::string i = std::to_string(layer);
  if (n == TensorNaming::Gguf) {
    const std::string p = "blk." + i + ".";
    switch (t) {
      case LayerTensor::AttnNorm: return p + "attn_norm";
      case LayerTensor::Q: return p + "attn_q";
      case LayerTensor::K: return p + "attn_k";
      case LayerTensor::V: return p + "attn_v";
      case LayerTensor::O: return p + "attn_output";
      case LayerTensor::QNorm: return p + "attn_q_norm";
      case LayerTensor::KNorm: return p + "attn_k_norm";
      case LayerTensor::FfnNorm: return p + "ffn_norm";
      case LayerTensor::Gate: return p + "ffn_gate";
      case LayerTensor::Up: return p + "ffn_up";
      case LayerTensor::Down: return p + "ffn_down";
    }
  }
  const std::string p = "model.layers." + i + ".";
  switch (t) {
    case LayerTensor::AttnNorm: return p + "input_layernorm";
    case LayerTensor::Q: return p + "self_attn.q_proj";
    case LayerTensor::K: return p + "self_attn.k_proj";
    case LayerTensor::V: return p + "self_attn.v_proj";
    case LayerTensor::O: return p + "self_attn.o_proj";
    case LayerTensor::QNorm: return p + "self_attn.q_norm";
    case LayerTensor::KNorm: return p + "self_attn.k_norm";
    case LayerTensor::FfnNorm: return p + "post_attention_layernorm";
    case LayerTensor::Gate: return p + "mlp.gate_proj";
    case LayerTensor::Up: return p + "mlp.up_proj";
    case LayerTensor::Down: return p + "mlp.down_proj";
  }
  return p;
}

std::string embed_name(TensorNaming n) {
  return n == TensorNaming::Gguf ? "token_embd.weight" : "model.embed_tokens.weight";
}
std::string final_norm_name(TensorNaming n) {
  return n == TensorNaming::Gguf ? "output_norm.weight" : "model.norm.weight";
}
std::string lm_head_name(TensorNaming n) {
  return n == TensorNaming::Gguf ? "output.weight" : "lm_head.weight";
}

void check_layer_count(const Checkpoint& ck) {
  const std::string prefix = ck.naming == TensorNaming::Gguf ? "blk." : "model.layers.";
  const int64_t n = ck.config.num_hidden_layers;
  const std::string key = ck.naming == TensorNaming::Gguf
                              ? "its metadata says " + ck.config.model_type + ".block_count = "
                              : "config says num_hidden_layers = ";
  std::vector<std::string> names = ck.source->names();
  if (ck.gguf)
    for (const auto& [name, type] : ck.gguf->unsupported_types()) names.push_back(name);
  int64_t max_layer = -1;
  for (const std::string& name : names) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    size_t i = prefix.size();
    int64_t layer = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') {
      layer = std::min<int64_t>(layer * 10 + (name[i] - '0'), int64_t(1) << 40);  // no overflow
      ++i;
    }
    if (i == prefix.size() || i == name.size() || name[i] != '.') continue;  // not "PREFIX<N>."
    if (layer >= n)
      throw Error("checkpoint " + ck.path + " has layer " + std::to_string(layer) +
                  "'s tensors (e.g. '" + name + "') but " + key + std::to_string(n));
    max_layer = std::max(max_layer, layer);
  }
  if (max_layer < n - 1) {
    // Named like require_tensor's error, before anything is allocated for n layers.
    const std::string missing =
        prefix + std::to_string(n - 1) +
        (ck.naming == TensorNaming::Gguf ? ".attn_norm.weight" : ".input_layernorm.weight");
    throw Error("missing tensor '" + missing + "' in " + ck.path + ": " + key + std::to_string(n) +
                " but " +
                (max_layer < 0 ? std::string("the checkpoint has no layer tensors")
                               : "the checkpoint's last layer is " + std::to_string(max_layer)));
  }
}

const TensorView* find_tensor(const Checkpoint& ck, const std::string& name) {
  const TensorView* t = ck.source->find(name);
  if (!t && ck.gguf) {
    const auto& un = ck.gguf->unsupported_types();
    if (auto it = un.find(name); it != un.end())
      throw Error(gguf::unsupported_type_error(*ck.gguf, name, it->second));
  }
  return t;
}

const TensorView& require_tensor(const Checkpoint& ck, const std::string& name) {
  const TensorView* t = find_tensor(ck, name);
  if (!t) throw Error("missing tensor '" + name + "' in " + ck.path);
  return *t;
}

const TensorView& require_vector(const Checkpoint& ck, const std::string& name, int64_t n) {
  const TensorView& t = require_tensor(ck, name);
  check(t.shape.size() == 1 && t.shape[0] == n, "tensor '" + name + "' has shape " + t.shape_str() +
                                                    ", expected [" + std::to_string(n) + "]");
  return t;
}

static bool not_converted(const QuantConfig& q, const std::string& base) {
  for (const auto& m : q.modules_to_not_convert)
    if (base.find(m) != std::string::npos) return true;
  return false;
}

LinearSource linear_source(const Checkpoint& ck, const std::string& base, int64_t out, int64_t in) {
  LinearSource s;
  s.out = out;
  s.in = in;
  const QuantConfig& q = ck.config.quant;
  if (q.enabled && !not_converted(q, base)) {
    // AWQ: every linear not excluded by modules_to_not_convert (null = none) is int4; a plain
    // .weight in its place is a broken checkpoint, not an fp16 layer.
    if (!ck.source->find(base + ".qweight"))
      throw Error("missing tensor '" + base + ".qweight' in " + ck.path +
                  " (an AWQ checkpoint whose modules_to_not_convert does not exclude '" + base +
                  "'" + (ck.source->find(base + ".weight") ? "; it has an unquantized .weight" : "") +
                  ")");
    AwqTensors t;
    t.qweight = require_tensor(ck, base + ".qweight");
    t.qzeros = require_tensor(ck, base + ".qzeros");
    t.scales = require_tensor(ck, base + ".scales");
    t.version = q.version;
    t.group_size = q.group_size;
    t.out = out;
    t.in = in;
    s.int4 = std::make_shared<const Int4Matrix>(decode_awq(t));
    return s;
  }
  s.weight = require_tensor(ck, base + ".weight");
  const auto& sh = s.weight.shape;
  check(sh.size() == 2 && sh[0] == out && sh[1] == in,
        "tensor '" + base + ".weight' has shape " + s.weight.shape_str() + ", expected [" +
            std::to_string(out) + ", " + std::to_string(in) + "]");
  return s;
}

}  // namespace perfx
