// A typed, shaped view of host memory (usually a window into an mmapped file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace perfx {

/// A tensor as stored in a checkpoint: dtype, shape in PyTorch order (outermost first; GGUF's ne is
/// reversed into this order) and a pointer to its bytes. Does not own the memory.
struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t dim(int i) const { return shape.at(i); }
  std::string shape_str() const;
};

/// Anything that hands out named tensors (a safetensors folder, a GGUF file).
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  /// The tensor called `name`, or nullptr.
  virtual const TensorView* find(const std::string& name) const = 0;
  /// All tensor names, in a stable order.
  virtual std::vector<std::string> names() const = 0;
};

}  // namespace perfx
