// Fuzz target: GGUF files (src/formats/gguf.*) from arbitrary bytes, via gguf::File::open_memory —
// the same parser File::open runs on a mapped file. A file that parses is then read the way a
// loader reads it: every metadata value through the typed getters, every tensor's bytes, the
// ModelConfig (config_from_gguf) and the embedded vocabulary (Tokenizer::from_gguf).
// Invariants: bad input is rejected only with perfx::Error (nothing else may escape, no ASan/UBSan
// report); every tensor find() returns has nbytes == the row size of its shape and lies inside the
// input (the copy is exactly the input's size, so a tensor past the end is an ASan report).
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "formats/gguf.h"
#include "formats/hf_config.h"
#include "fuzz_common.h"
#include "perfx/status.h"
#include "perfx/tokenizer.h"

using namespace perfx;

namespace {

void touch_values(const gguf::File& f) {
  for (const auto& [key, v] : f.metadata()) {
    try { (void)f.get_string(key, ""); } catch (const Error&) {}
    try { (void)f.get_int(key, 0); } catch (const Error&) {}
    try { (void)f.get_float(key, 0); } catch (const Error&) {}
    try { (void)f.get_bool(key, false); } catch (const Error&) {}
    try { (void)f.get_string_array(key); } catch (const Error&) {}
    try { (void)f.get_float_array(key); } catch (const Error&) {}
    try { (void)f.get_int_array(key); } catch (const Error&) {}
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<gguf::File> f;
  try {
    f = gguf::File::open_memory(data, size, "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  touch_values(*f);
  unsigned acc = 0;
  for (const std::string& name : f->names()) {
    const TensorView* t = f->find(name);
    FUZZ_ASSERT(t != nullptr, "names() lists a tensor find() does not return");
    FUZZ_ASSERT(t->nbytes <= size, "tensor larger than the file");
    const int64_t numel = t->numel();  // what every loader computes (UBSan: must not overflow)
    if (!t->shape.empty() && t->shape.back() > 0) {
      const int64_t rows = numel / t->shape.back();
      FUZZ_ASSERT(t->nbytes == (size_t)rows * dtype_row_bytes(t->dtype, t->shape.back()),
                  "tensor nbytes does not match its shape");
    }
    const auto* p = static_cast<const uint8_t*>(t->data);
    for (size_t i = 0; i < t->nbytes; ++i) acc += p[i];  // ASan: every byte inside the copy
  }
  if (acc == 0xFFFFFFFFu) std::abort();  // keep the reads
  try {
    (void)config_from_gguf(*f);
  } catch (const Error&) {
  }
  try {
    auto tok = Tokenizer::from_gguf(*f);
    const auto ids = tok->encode("Hello world <s> 123", true);
    for (int32_t id : ids) FUZZ_ASSERT(id >= 0 && id < tok->vocab_size(), "encode id out of range");
    (void)tok->decode(ids);
  } catch (const Error&) {
  }
  return 0;
}
