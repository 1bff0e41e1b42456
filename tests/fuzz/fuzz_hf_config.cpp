// Fuzz target: config.json text -> ModelConfig (parse_hf_config, src/formats/hf_config.*), and the
// legacy AutoAWQ quant_config.json (parse_legacy_quant_config). Input: the config.json text; the
// same bytes are also fed to the legacy parser.
// Invariants: bad input is rejected only with perfx::Error; an accepted config satisfies what the
// parser documents it validated (positive sizes, heads divisible by KV heads, even head_dim,
// eps/theta > 0, bits 4, group_size > 0 or -1) and its derived values (trained_context, q_dim,
// kv_dim) compute without overflow (UBSan).
#include <cmath>
#include <cstdint>
#include <string>

#include "formats/hf_config.h"
#include "fuzz_common.h"
#include "perfx/status.h"

using namespace perfx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const ModelConfig c = parse_hf_config(text, "fuzz/config.json");
    FUZZ_ASSERT(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_hidden_layers > 0,
                "non-positive size accepted");
    FUZZ_ASSERT(c.num_attention_heads > 0 && c.num_key_value_heads > 0, "no heads accepted");
    FUZZ_ASSERT(c.num_attention_heads % c.num_key_value_heads == 0,
                "heads not divisible by KV heads");
    FUZZ_ASSERT(c.head_dim > 0 && c.head_dim % 2 == 0, "odd or non-positive head_dim");
    FUZZ_ASSERT(c.vocab_size > 0 && c.max_position_embeddings > 0, "non-positive vocab/context");
    FUZZ_ASSERT(c.rms_norm_eps > 0 && c.rope_theta > 0, "eps/theta not positive");
    if (c.quant.enabled)
      FUZZ_ASSERT(c.quant.bits == 4 && (c.quant.group_size > 0 || c.quant.group_size == -1),
                  "unsupported quantization accepted");
    volatile int64_t sink = c.trained_context();
    sink = c.q_dim();
    sink = c.kv_dim();
    (void)sink;
  } catch (const Error&) {
  }
  try {
    const QuantConfig q = parse_legacy_quant_config(text, "fuzz/quant_config.json");
    FUZZ_ASSERT(q.enabled && q.bits == 4, "legacy quant config with bits != 4 accepted");
  } catch (const Error&) {
  }
  return 0;
}
