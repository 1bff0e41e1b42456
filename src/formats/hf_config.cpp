#include "formats/hf_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "core/mmap.h"
#include "formats/gguf.h"
#include "formats/json_strict.h"
#include "perfx/status.h"

namespace perfx {

namespace {

using json = nlohmann::json;
using formats_detail::json_snippet;

std::string lower(std::string s) {
  for (char& c : s) c = (char)std::tolower((unsigned char)c);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Typed access to a JSON object. `prefix` qualifies nested keys in messages ("rope_scaling.").

class JsonObj {
 public:
  JsonObj(const json& j, const std::string& origin, const std::string& prefix = "")
      : j_(j), origin_(origin), prefix_(prefix) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw Error(origin_ + ": config key '" + prefix_ + key + "' " + what);
  }

  /// The value, or nullptr when absent or null.
  const json* get(const std::string& key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const std::string& key) const { return get(key) != nullptr; }

  int64_t get_int(const std::string& key, int64_t def) const {
    const json* v = get(key);
    if (!v) return def;
    if (v->is_number_unsigned()) {
      const uint64_t u = v->get<uint64_t>();
      if (u > (uint64_t)std::numeric_limits<int64_t>::max()) fail(key, "is out of range");
      return (int64_t)u;
    }
    if (v->is_number_integer()) return v->get<int64_t>();
    if (v->is_number_float()) {  // e.g. 8192.0: accept integral values
      const double d = v->get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return (int64_t)d;
    }
    fail(key, "must be an integer (got " + json_snippet(*v) + ")");
  }
  int64_t req_int(const std::string& key) const {
    if (!has(key)) fail(key, "is required");
    return get_int(key, 0);
  }

  double get_num(const std::string& key, double def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_number()) fail(key, "must be a number (got " + json_snippet(*v) + ")");
    return v->get<double>();
  }
  double req_num(const std::string& key) const {
    if (!has(key)) fail(key, "is required");
    return get_num(key, 0);
  }

  bool get_bool(const std::string& key, bool def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) fail(key, "must be true or false (got " + json_snippet(*v) + ")");
    return v->get<bool>();
  }

  std::string get_str(const std::string& key, const std::string& def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_string()) fail(key, "must be a string (got " + json_snippet(*v) + ")");
    return v->get<std::string>();
  }

  /// An int, or a list of ints (eos_token_id); null/absent -> empty.
  std::vector<int32_t> get_id_list(const std::string& key) const {
    std::vector<int32_t> out;
    const json* v = get(key);
    if (!v) return out;
    auto one = [&](const json& e) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 ||
          e.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        fail(key,
             "must be a non-negative token id or a list of them (got " + json_snippet(*v) + ")");
      }
      const int32_t id = (int32_t)e.get<int64_t>();
      if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    };
    if (v->is_array()) {
      for (const json& e : *v) one(e);
    } else {
      one(*v);
    }
    return out;
  }

  const std::string& origin() const { return origin_; }
  const json& raw() const { return j_; }

 private:
  const json& j_;
  const std::string& origin_;
  std::string prefix_;
};

json parse_json_text(const std::string& text, const std::string& origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw Error(origin + ": invalid JSON: " + e.what());
  }
}

// yarn attention factor: mscale(s, m) = 0.1·m·ln s + 1 (1 when s <= 1).
double yarn_mscale(double scale, double m) {
  return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
}

// rope_scaling / rope_parameters (FORMATS.md §5.3). `o` is the dict; max_pos is already known.
RopeScaling parse_rope_scaling(const JsonObj& o, int64_t max_pos) {
  RopeScaling rs;
  std::string type = o.get_str("rope_type", "");
  if (type.empty()) type = o.get_str("type", "");
  type = lower(type);
  if (type.empty() || type == "default" || type == "none") return rs;

  auto factor = [&](const char* what) {
    const double f = o.req_num("factor");
    // <= FLT_MAX: the factor is stored as a float (a larger double would become inf).
    if (!(f > 0) || !(f <= std::numeric_limits<float>::max()))
      o.fail("factor", std::string("must be > 0 (and a finite float) for ") + what);
    return f;
  };
  if (type == "linear") {
    rs.type = RopeScaling::Type::Linear;
    rs.factor = (float)factor("linear scaling");
  } else if (type == "dynamic") {
    rs.type = RopeScaling::Type::Dynamic;
    rs.factor = (float)factor("dynamic scaling");
    rs.original_max_position_embeddings = o.get_int("original_max_position_embeddings", max_pos);
  } else if (type == "llama3") {
    rs.type = RopeScaling::Type::Llama3;
    rs.factor = (float)factor("llama3 scaling");
    rs.low_freq_factor = (float)o.req_num("low_freq_factor");
    rs.high_freq_factor = (float)o.req_num("high_freq_factor");
    rs.original_max_position_embeddings = o.req_int("original_max_position_embeddings");
    if (!(rs.low_freq_factor > 0)) o.fail("low_freq_factor", "must be > 0");
    if (!(rs.high_freq_factor > rs.low_freq_factor)) {
      o.fail("high_freq_factor", "must be greater than low_freq_factor");
    }
  } else if (type == "yarn") {
    rs.type = RopeScaling::Type::Yarn;
    const double f = factor("yarn scaling");
    rs.factor = (float)f;
    rs.original_max_position_embeddings = o.get_int("original_max_position_embeddings", max_pos);
    rs.beta_fast = (float)o.get_num("beta_fast", 32.0);
    rs.beta_slow = (float)o.get_num("beta_slow", 1.0);
    if (o.has("attention_factor")) {
      rs.attention_factor = (float)o.get_num("attention_factor", 1.0);
    } else if (o.has("mscale") && o.has("mscale_all_dim")) {
      rs.attention_factor = (float)(yarn_mscale(f, o.get_num("mscale", 1.0)) /
                                    yarn_mscale(f, o.get_num("mscale_all_dim", 1.0)));
    } else {
      rs.attention_factor = (float)yarn_mscale(f, 1.0);  // 0.1·ln(F) + 1
    }
    if (!(rs.attention_factor > 0)) o.fail("attention_factor", "must be > 0");
    if (!(rs.beta_fast > rs.beta_slow)) o.fail("beta_fast", "must be greater than beta_slow");
  } else {
    o.fail(o.has("rope_type") ? "rope_type" : "type",
           "has unsupported rope scaling type '" + type +
               "' (supported: default, linear, dynamic, llama3, yarn)");
  }
  if (rs.original_max_position_embeddings < 0) {
    o.fail("original_max_position_embeddings", "must be positive");
  }
  return rs;
}

QuantConfig parse_awq_section(const JsonObj& q) {
  QuantConfig qc;
  qc.enabled = true;
  const std::string method = lower(q.get_str("quant_method", ""));
  if (method.empty()) q.fail("quant_method", "is required");
  if (method != "awq") {
    q.fail("quant_method",
           "names an unsupported quantization method '" + method + "' (only awq is supported)");
  }
  qc.method = "awq";
  qc.bits = (int)q.get_int("bits", 4);
  qc.group_size = (int)q.get_int("group_size", 128);
  qc.zero_point = q.get_bool("zero_point", true);
  qc.version = lower(q.get_str("version", "gemm"));
  if (const json* m = q.get("modules_to_not_convert")) {
    if (!m->is_array()) q.fail("modules_to_not_convert", "must be a list of strings or null");
    for (const json& e : *m) {
      if (!e.is_string()) q.fail("modules_to_not_convert", "must be a list of strings or null");
      qc.modules_to_not_convert.push_back(e.get<std::string>());
    }
  }
  return qc;
}

// Checks shared by config.json, quant_config.json and GGUF: AWQ parameters the engine can load.
void validate_quant(const QuantConfig& qc, const std::string& origin, const std::string& bits_key,
                    const std::string& group_key, const std::string& version_key) {
  if (!qc.enabled) return;
  if (qc.bits != 4) {
    throw Error(origin + ": config key '" + bits_key + "' is " + std::to_string(qc.bits) +
                "; only 4-bit AWQ is supported");
  }
  if (qc.group_size != -1 && qc.group_size <= 0) {
    throw Error(origin + ": config key '" + group_key + "' is " + std::to_string(qc.group_size) +
                "; must be positive or -1 (whole row)");
  }
  static const char* kVersions[] = {"gemm", "gemv", "gemv_fast", "marlin", "exllama", "ipex"};
  if (std::find_if(std::begin(kVersions), std::end(kVersions),
                   [&](const char* v) { return qc.version == v; }) == std::end(kVersions)) {
    throw Error(origin + ": config key '" + version_key + "' has unsupported AWQ version '" +
                qc.version + "' (gemm, gemv, gemv_fast, marlin, exllama, ipex)");
  }
}

// "exllama" and "ipex" are kernels that read GEMM-layout files (FORMATS.md §2.1): keep the layout.
void normalize_quant_version(QuantConfig& qc) {
  if (qc.version == "exllama" || qc.version == "ipex") qc.version = "gemm";
}

// Range checks on a filled config. key(n) maps an HF key name to the name used in the source file.
template <class KeyName>
void validate_config(const ModelConfig& c, const std::string& origin, KeyName key) {
  auto positive = [&](const char* k, int64_t v) {
    if (v <= 0) {
      throw Error(origin + ": config key '" + key(k) + "' must be positive (got " +
                  std::to_string(v) + ")");
    }
    // The engine holds sizes in int (kernels, KV cache): a larger value must be refused here,
    // naming the key, not truncated later (head_dim 2^40 read as 0 deep in the backend).
    if (v > std::numeric_limits<int32_t>::max()) {
      throw Error(origin + ": config key '" + key(k) + "' is " + std::to_string(v) +
                  ", out of range (at most " + std::to_string(std::numeric_limits<int32_t>::max()) +
                  ")");
    }
  };
  positive("vocab_size", c.vocab_size);
  positive("hidden_size", c.hidden_size);
  positive("intermediate_size", c.intermediate_size);
  positive("num_hidden_layers", c.num_hidden_layers);
  positive("num_attention_heads", c.num_attention_heads);
  positive("num_key_value_heads", c.num_key_value_heads);
  positive("head_dim", c.head_dim);
  positive("max_position_embeddings", c.max_position_embeddings);
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    throw Error(origin + ": config key '" + key("num_attention_heads") + "' (" +
                std::to_string(c.num_attention_heads) + ") is not divisible by '" +
                key("num_key_value_heads") + "' (" + std::to_string(c.num_key_value_heads) + ")");
  }
  if (c.head_dim % 2 != 0) {
    throw Error(origin + ": config key '" + key("head_dim") + "' must be even for RoPE (got " +
                std::to_string(c.head_dim) + ")");
  }
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps)) {
    throw Error(origin + ": config key '" + key("rms_norm_eps") + "' must be > 0 (got " +
                std::to_string(c.rms_norm_eps) + ")");
  }
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta)) {
    throw Error(origin + ": config key '" + key("rope_theta") + "' must be > 0 (got " +
                std::to_string(c.rope_theta) + ")");
  }
  if (!(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1)) {
    throw Error(origin + ": config key '" + key("partial_rotary_factor") +
                "' must be in (0, 1] (got " + std::to_string(c.partial_rotary_factor) + ")");
  }
  // The RoPE scaling parameters as stored (floats): a double that passed the parser's checks can
  // still round to 0 (1e-50) or to inf (1e300) here, and GGUF's YaRN betas are read unchecked.
  const RopeScaling& rs = c.rope_scaling;
  auto positive_float = [&](const char* k, float v) {
    if (!(v > 0) || !std::isfinite(v)) {
      throw Error(origin + ": config key '" + key(k) +
                  "' must be > 0 and finite as a 32-bit float (got " + std::to_string(v) + ")");
    }
  };
  if (rs.type != RopeScaling::Type::None) positive_float("rope_scaling.factor", rs.factor);
  if (rs.type == RopeScaling::Type::Llama3) {
    positive_float("rope_scaling.low_freq_factor", rs.low_freq_factor);
    positive_float("rope_scaling.high_freq_factor", rs.high_freq_factor);
  }
  if (rs.type == RopeScaling::Type::Yarn) {
    positive_float("rope_scaling.attention_factor", rs.attention_factor);
    // YaRN's correction range takes log(M / (2π·beta)) / log(rope_theta) (arXiv 2309.00071 §3.2,
    // transformers' _compute_yarn_parameters): the betas must be positive and rope_theta > 1.
    positive_float("rope_scaling.beta_fast", rs.beta_fast);
    positive_float("rope_scaling.beta_slow", rs.beta_slow);
    if (!(rs.beta_fast > rs.beta_slow)) {
      throw Error(origin + ": config key '" + key("rope_scaling.beta_fast") + "' (" +
                  std::to_string(rs.beta_fast) + ") must be greater than '" +
                  key("rope_scaling.beta_slow") + "' (" + std::to_string(rs.beta_slow) + ")");
    }
    if (!(c.rope_theta > 1)) {
      throw Error(origin + ": config key '" + key("rope_theta") +
                  "' must be > 1 for yarn rope scaling (got " + std::to_string(c.rope_theta) +
                  ")");
    }
  }
  const double rot = c.head_dim * (double)c.partial_rotary_factor;
  if (rot != std::floor(rot) || (int64_t)rot % 2 != 0) {
    throw Error(origin + ": config key '" + key("partial_rotary_factor") +
                "' gives a rotary dimension of " + std::to_string(rot) +
                ", which must be an even integer");
  }
}

const char* const kFamilies[] = {"llama", "mistral", "qwen2", "qwen3"};

bool supported_family(const std::string& t) {
  return std::find_if(std::begin(kFamilies), std::end(kFamilies),
                      [&](const char* f) { return t == f; }) != std::end(kFamilies);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// HF config.json

ModelConfig parse_hf_config(const std::string& json_text, const std::string& origin) {
  const json root = parse_json_text(json_text, origin);
  if (!root.is_object()) throw Error(origin + ": config.json is not a JSON object");
  const JsonObj o(root, origin);
  ModelConfig c;

  // Family: model_type, else inferred from architectures[0].
  std::string mt = o.get_str("model_type", "");
  if (mt.empty()) {
    static const std::map<std::string, std::string> kArch = {{"LlamaForCausalLM", "llama"},
                                                             {"MistralForCausalLM", "mistral"},
                                                             {"Qwen2ForCausalLM", "qwen2"},
                                                             {"Qwen3ForCausalLM", "qwen3"}};
    if (const json* a = o.get("architectures");
        a && a->is_array() && !a->empty() && (*a)[0].is_string()) {
      auto it = kArch.find((*a)[0].get<std::string>());
      if (it != kArch.end()) mt = it->second;
    }
    if (mt.empty()) o.fail("model_type", "is required");
  }
  if (!supported_family(mt)) {
    throw Error("unsupported model_type '" + mt + "' in " + origin +
                " (supported: llama, mistral, qwen2, qwen3)");
  }
  c.model_type = mt;

  // Sizes (LlamaConfig defaults when absent).
  c.vocab_size = o.get_int("vocab_size", 32000);
  c.hidden_size = o.get_int("hidden_size", 4096);
  c.intermediate_size = o.get_int("intermediate_size", 11008);
  c.num_hidden_layers = o.get_int("num_hidden_layers", 32);
  c.num_attention_heads = o.get_int("num_attention_heads", 32);
  c.num_key_value_heads = o.get_int("num_key_value_heads", c.num_attention_heads);
  c.max_position_embeddings = o.get_int("max_position_embeddings", 2048);
  c.rms_norm_eps = (float)o.get_num("rms_norm_eps", 1e-6);
  if (c.num_attention_heads <= 0) o.fail("num_attention_heads", "must be positive");
  if (o.has("head_dim")) {
    c.head_dim = o.get_int("head_dim", 0);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      o.fail("hidden_size",
             "(" + std::to_string(c.hidden_size) + ") is not divisible by num_attention_heads (" +
                 std::to_string(c.num_attention_heads) + ") and head_dim is not set");
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }

  const std::string act = lower(o.get_str("hidden_act", "silu"));
  if (act != "silu" && act != "swish") {
    o.fail("hidden_act", "is '" + act + "'; only silu is supported");
  }

  // RoPE: rope_theta / rope_scaling (transformers 4) or rope_parameters (transformers 5).
  c.rope_theta = (float)o.get_num("rope_theta", 10000.0);
  c.partial_rotary_factor = (float)o.get_num("partial_rotary_factor", 1.0);
  const json* rp = o.get("rope_parameters");
  if (rp) {
    if (!rp->is_object()) o.fail("rope_parameters", "must be an object");
    const JsonObj p(*rp, origin, "rope_parameters.");
    c.rope_theta = (float)p.get_num("rope_theta", c.rope_theta);
    c.partial_rotary_factor = (float)p.get_num("partial_rotary_factor", c.partial_rotary_factor);
  }
  if (const json* rs = o.get("rope_scaling")) {
    if (!rs->is_object()) o.fail("rope_scaling", "must be an object or null");
    c.rope_scaling =
        parse_rope_scaling(JsonObj(*rs, origin, "rope_scaling."), c.max_position_embeddings);
  } else if (rp) {
    c.rope_scaling =
        parse_rope_scaling(JsonObj(*rp, origin, "rope_parameters."), c.max_position_embeddings);
  }

  // Sliding-window attention (FORMATS.md §5): Mistral v0.1 sets sliding_window; Qwen2/3 use it only
  // with use_sliding_window, which no released model sets.
  if (mt == "mistral") {
    c.sliding_window = o.get_int("sliding_window", 0);
    if (c.sliding_window < 0) o.fail("sliding_window", "must be positive or null");
  } else if ((mt == "qwen2" || mt == "qwen3") && o.get_bool("use_sliding_window", false)) {
    o.fail("use_sliding_window", "is true; sliding-window attention is not supported for " + mt);
  }

  // Family-specific bias / norm rules (FORMATS.md §5.4).
  const bool attention_bias = o.get_bool("attention_bias", false);
  const bool mlp_bias = o.get_bool("mlp_bias", false);
  if (mt == "qwen2") {
    c.qkv_bias = true;  // hard-coded in Qwen2Attention; attention_bias is ignored
    c.o_bias = false;
  } else {
    c.qkv_bias = attention_bias;
    c.o_bias = attention_bias;
  }
  c.qk_norm = (mt == "qwen3");
  c.mlp_bias = (mt == "llama") ? mlp_bias : false;  // only LlamaMLP honours mlp_bias
  c.tie_word_embeddings = o.get_bool("tie_word_embeddings", false);
  c.rope_interleaved = false;  // HF checkpoints use rotate_half

  // Special tokens. LlamaConfig / MistralConfig default to bos 1, eos 2; Qwen configs have none.
  const bool llama_like = (mt == "llama" || mt == "mistral");
  if (o.raw().contains("bos_token_id")) {
    const json& b = o.raw()["bos_token_id"];
    if (b.is_null()) {
      c.bos_token_id = -1;
    } else {
      const int64_t id = o.get_int("bos_token_id", -1);
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        o.fail("bos_token_id", "must be a non-negative token id");
      }
      c.bos_token_id = (int32_t)id;
    }
  } else {
    c.bos_token_id = llama_like ? 1 : -1;
  }
  if (o.raw().contains("eos_token_id")) {
    c.eos_token_ids = o.get_id_list("eos_token_id");
  } else if (llama_like) {
    c.eos_token_ids = {2};
  }

  // AWQ.
  if (const json* q = o.get("quantization_config")) {
    if (!q->is_object()) o.fail("quantization_config", "must be an object");
    c.quant = parse_awq_section(JsonObj(*q, origin, "quantization_config."));
    validate_quant(c.quant, origin, "quantization_config.bits", "quantization_config.group_size",
                   "quantization_config.version");
    normalize_quant_version(c.quant);
  }

  validate_config(c, origin, [](const char* k) { return std::string(k); });
  return c;
}

QuantConfig parse_legacy_quant_config(const std::string& json_text, const std::string& origin) {
  const json root = parse_json_text(json_text, origin);
  if (!root.is_object()) throw Error(origin + ": quant_config.json is not a JSON object");
  const JsonObj o(root, origin);
  QuantConfig qc;
  qc.enabled = true;
  const std::string method = lower(o.get_str("quant_method", "awq"));
  if (method != "awq") {
    o.fail("quant_method",
           "names an unsupported quantization method '" + method + "' (only awq is supported)");
  }
  qc.bits = (int)o.get_int("w_bit", o.get_int("bits", 4));
  qc.group_size = (int)o.get_int("q_group_size", o.get_int("group_size", 128));
  qc.zero_point = o.get_bool("zero_point", true);
  qc.version = lower(o.get_str("version", "gemm"));
  validate_quant(qc, origin, "w_bit", "q_group_size", "version");
  normalize_quant_version(qc);
  return qc;
}

ModelConfig load_hf_config(const std::string& dir) {
  const std::string cfg_path = dir + "/config.json";
  if (!path_exists(cfg_path)) throw Error("no config.json in '" + dir + "'");
  ModelConfig c = parse_hf_config(read_text_file(cfg_path), cfg_path);

  const std::string legacy = dir + "/quant_config.json";
  if (!c.quant.enabled && path_exists(legacy)) {
    c.quant = parse_legacy_quant_config(read_text_file(legacy), legacy);
  }

  const std::string gen_path = dir + "/generation_config.json";
  if (path_exists(gen_path)) {
    const json g = parse_json_text(read_text_file(gen_path), gen_path);
    if (!g.is_object()) throw Error(gen_path + ": not a JSON object");
    const JsonObj go(g, gen_path);
    for (int32_t id : go.get_id_list("eos_token_id")) {
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
        c.eos_token_ids.push_back(id);
      }
    }
    if (c.bos_token_id < 0) {
      const int64_t b = go.get_int("bos_token_id", -1);
      if (b > std::numeric_limits<int32_t>::max()) go.fail("bos_token_id", "is out of range");
      if (b >= 0) c.bos_token_id = (int32_t)b;
    }
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// GGUF metadata

ModelConfig config_from_gguf(const gguf::File& f) {
  const std::string origin = "GGUF '" + f.path() + "'";
  auto fail = [&](const std::string& what) -> void { throw Error(origin + ": " + what); };
  // Typed reads whose errors name the file.
  auto val = [&](const std::string& key) -> const gguf::Value* { return f.find_value(key); };
  auto get_int = [&](const std::string& key, int64_t def) -> int64_t {
    const gguf::Value* v = val(key);
    if (!v) return def;
    if (!v->is_int()) {
      fail("metadata key '" + key + "' must be an integer" +
           (v->type == gguf::ValueType::ARRAY ? " (per-layer arrays are not supported)" : ""));
    }
    return v->as_int(key);
  };
  auto req_int = [&](const std::string& key) -> int64_t {
    if (!val(key)) fail("missing metadata key '" + key + "'");
    return get_int(key, 0);
  };
  auto get_num = [&](const std::string& key, double def) -> double {
    const gguf::Value* v = val(key);
    if (!v) return def;
    if (!v->is_int() && v->type != gguf::ValueType::F32 && v->type != gguf::ValueType::F64) {
      fail("metadata key '" + key + "' must be a number");
    }
    return v->as_float(key);
  };
  auto req_num = [&](const std::string& key) -> double {
    if (!val(key)) fail("missing metadata key '" + key + "'");
    return get_num(key, 0);
  };
  auto get_str = [&](const std::string& key, const std::string& def) -> std::string {
    const gguf::Value* v = val(key);
    if (!v) return def;
    if (v->type != gguf::ValueType::STRING) fail("metadata key '" + key + "' must be a string");
    return v->s;
  };
  auto has_tensor = [&](const std::string& name) {
    return f.find(name) != nullptr || f.unsupported_types().count(name) != 0;
  };

  const std::string arch = get_str("general.architecture", "");
  if (arch.empty()) fail("missing metadata key 'general.architecture'");
  if (!supported_family(arch)) {
    fail("unsupported architecture '" + arch + "' (supported: llama, mistral, qwen2, qwen3)");
  }
  const std::string p = arch + ".";
  ModelConfig c;
  c.model_type = arch;
  c.max_position_embeddings = req_int(p + "context_length");
  c.hidden_size = req_int(p + "embedding_length");
  c.num_hidden_layers = req_int(p + "block_count");
  c.intermediate_size = req_int(p + "feed_forward_length");
  c.num_attention_heads = req_int(p + "attention.head_count");
  c.num_key_value_heads = get_int(p + "attention.head_count_kv", c.num_attention_heads);
  c.rms_norm_eps = (float)req_num(p + "attention.layer_norm_rms_epsilon");
  c.rope_theta = (float)get_num(p + "rope.freq_base", 10000.0);
  if (c.num_attention_heads <= 0)
    fail("metadata key '" + p + "attention.head_count' must be positive");

  // head_dim: attention.key_length, else embedding/heads; rope.dimension_count is the rotated part.
  if (val(p + "attention.key_length")) {
    c.head_dim = get_int(p + "attention.key_length", 0);
    const int64_t vl = get_int(p + "attention.value_length", c.head_dim);
    if (vl != c.head_dim) {
      fail("metadata key '" + p + "attention.value_length' (" + std::to_string(vl) +
           ") differs from key_length (" + std::to_string(c.head_dim) + "); not supported");
    }
  } else if (c.hidden_size % c.num_attention_heads == 0) {
    c.head_dim = c.hidden_size / c.num_attention_heads;
  } else {
    c.head_dim = get_int(p + "rope.dimension_count", 0);
    if (c.head_dim <= 0) {
      fail("cannot determine head_dim: '" + p + "embedding_length' is not divisible by '" + p +
           "attention.head_count' and no key_length is given");
    }
  }
  const int64_t n_rot = get_int(p + "rope.dimension_count", c.head_dim);
  if (n_rot <= 0 || n_rot > c.head_dim) {
    fail("metadata key '" + p + "rope.dimension_count' (" + std::to_string(n_rot) +
         ") must be in [1, head_dim " + std::to_string(c.head_dim) + "]");
  }
  c.partial_rotary_factor = (float)((double)n_rot / (double)c.head_dim);

  // RoPE scaling. (llama3-style scaling is stored as the rope_freqs.weight tensor, not as keys.)
  const std::string stype = lower(get_str(p + "rope.scaling.type", ""));
  const double sfactor = get_num(p + "rope.scaling.factor", 0.0);
  const int64_t orig_ctx = get_int(p + "rope.scaling.original_context_length", 0);
  if (stype == "linear" || (stype.empty() && val(p + "rope.scale_linear"))) {
    const double fct = stype.empty() ? get_num(p + "rope.scale_linear", 1.0) : sfactor;
    if (!(fct > 0) || !(fct <= std::numeric_limits<float>::max()))
      fail("metadata key '" + p + "rope.scaling.factor' must be > 0 (and a finite float)");
    if (fct != 1.0) {
      c.rope_scaling.type = RopeScaling::Type::Linear;
      c.rope_scaling.factor = (float)fct;
    }
  } else if (stype == "yarn") {
    if (!(sfactor > 0) || !(sfactor <= std::numeric_limits<float>::max()))
      fail("metadata key '" + p + "rope.scaling.factor' must be > 0 (and a finite float) for yarn");
    RopeScaling& rs = c.rope_scaling;
    rs.type = RopeScaling::Type::Yarn;
    rs.factor = (float)sfactor;
    rs.original_max_position_embeddings = orig_ctx > 0 ? orig_ctx : c.max_position_embeddings;
    rs.beta_fast = (float)get_num(p + "rope.scaling.yarn_beta_fast", 32.0);
    rs.beta_slow = (float)get_num(p + "rope.scaling.yarn_beta_slow", 1.0);
    // llama.cpp multiplies its own 0.1·ln(F)+1 by rope.scaling.attn_factor (default 1).
    const double attn = get_num(p + "rope.scaling.attn_factor", 1.0);
    if (!(attn > 0) || !(attn <= std::numeric_limits<float>::max()))
      fail("metadata key '" + p + "rope.scaling.attn_factor' must be > 0 and finite (got " +
           std::to_string(attn) + ")");
    rs.attention_factor = (float)(yarn_mscale(sfactor, 1.0) * attn);
  } else if (!stype.empty() && stype != "none") {
    fail("metadata key '" + p + "rope.scaling.type' has unsupported value '" + stype +
         "' (none, linear, yarn)");
  }

  // Vocabulary: rows of the embedding, else <arch>.vocab_size, else the tokenizer's token count.
  if (const TensorView* emb = f.find("token_embd.weight"); emb && emb->shape.size() == 2) {
    c.vocab_size = emb->shape[0];
  } else if (val(p + "vocab_size")) {
    c.vocab_size = get_int(p + "vocab_size", 0);
  } else if (const gguf::Value* toks = val("tokenizer.ggml.tokens");
             toks && toks->type == gguf::ValueType::ARRAY) {
    c.vocab_size = (int64_t)toks->array.size();
  } else {
    fail("cannot determine the vocabulary size (no token_embd.weight, '" + p +
         "vocab_size' or tokenizer.ggml.tokens)");
  }

  c.tie_word_embeddings = !has_tensor("output.weight");
  c.rope_interleaved = (arch == "llama" || arch == "mistral");
  c.qkv_bias = (arch == "qwen2") || has_tensor("blk.0.attn_q.bias");
  c.o_bias = has_tensor("blk.0.attn_output.bias");
  c.mlp_bias = has_tensor("blk.0.ffn_up.bias") || has_tensor("blk.0.ffn_gate.bias") ||
               has_tensor("blk.0.ffn_down.bias");
  c.qk_norm = (arch == "qwen3") || has_tensor("blk.0.attn_q_norm.weight");

  // Special tokens: ids >= 2^31 (llama.cpp writes 0xFFFFFFFF for "none") count as absent.
  auto token_id = [&](const std::string& key) -> int32_t {
    const int64_t id = get_int(key, -1);
    return (id < 0 || id > std::numeric_limits<int32_t>::max()) ? -1 : (int32_t)id;
  };
  c.bos_token_id = token_id("tokenizer.ggml.bos_token_id");
  c.eos_token_ids.clear();
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                        "tokenizer.ggml.eom_token_id"}) {
    const int32_t id = token_id(k);
    if (id >= 0 &&
        std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(id);
    }
  }

  const std::map<std::string, std::string> gguf_keys = {
      {"vocab_size", "vocab_size (token_embd.weight rows)"},
      {"hidden_size", p + "embedding_length"},
      {"intermediate_size", p + "feed_forward_length"},
      {"num_hidden_layers", p + "block_count"},
      {"num_attention_heads", p + "attention.head_count"},
      {"num_key_value_heads", p + "attention.head_count_kv"},
      {"head_dim", p + "attention.key_length"},
      {"max_position_embeddings", p + "context_length"},
      {"rms_norm_eps", p + "attention.layer_norm_rms_epsilon"},
      {"rope_theta", p + "rope.freq_base"},
      {"partial_rotary_factor", p + "rope.dimension_count"},
      {"rope_scaling.factor", p + "rope.scaling.factor"},
      {"rope_scaling.attention_factor", p + "rope.scaling.attn_factor"},
      {"rope_scaling.beta_fast", p + "rope.scaling.yarn_beta_fast"},
      {"rope_scaling.beta_slow", p + "rope.scaling.yarn_beta_slow"}};
  validate_config(c, origin, [&](const char* k) {
    auto it = gguf_keys.find(k);
    return it == gguf_keys.end() ? std::string(k) : it->second;
  });
  return c;
}

}  // namespace perfx
