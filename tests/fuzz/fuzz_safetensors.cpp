// Fuzz target: .safetensors files (src/formats/safetensors.*) from arbitrary bytes, via
// SafetensorsFile::open_memory — the same validation SafetensorsFile::open runs on a mapped file.
// Invariants: bad input is rejected only with perfx::Error; a file that parses has tensors whose
// nbytes == numel * element size, lying inside the input (every byte is read: the copy is exactly
// the input's size, so a tensor past the end is an ASan report), names() sorted and all found.
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "formats/safetensors.h"
#include "fuzz_common.h"
#include "perfx/status.h"

using namespace perfx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<SafetensorsFile> f;
  try {
    f = SafetensorsFile::open_memory(data, size, "fuzz.safetensors");
  } catch (const Error&) {
    return 0;
  }
  unsigned acc = 0;
  const auto names = f->names();
  for (size_t k = 0; k < names.size(); ++k) {
    if (k > 0) FUZZ_ASSERT(names[k - 1] < names[k], "names() not sorted or duplicated");
    const TensorView* t = f->find(names[k]);
    FUZZ_ASSERT(t != nullptr, "names() lists a tensor find() does not return");
    FUZZ_ASSERT(t->nbytes + 8 <= size, "tensor larger than the file");
    FUZZ_ASSERT(t->nbytes == (size_t)t->numel() * dtype_block_bytes(t->dtype),
                "nbytes != numel * element size");
    const auto* p = static_cast<const uint8_t*>(t->data);
    for (size_t i = 0; i < t->nbytes; ++i) acc += p[i];
  }
  for (const auto& [k, v] : f->metadata()) acc += (unsigned)(k.size() + v.size());
  if (acc == 0xFFFFFFFFu) std::abort();  // keep the reads
  return 0;
}
