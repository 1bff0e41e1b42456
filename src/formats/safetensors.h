// safetensors reader (FORMATS.md §3): single file or sharded folder, mmapped, fully validated.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "core/tensor.h"

namespace perfx {

/// One .safetensors file. Validation (each failure is a perfx::Error naming the file and the problem):
/// header length within the file and <= 100,000,000; header is a JSON object; known dtype; shape of
/// non-negative ints; data_offsets [begin, end] with end - begin == numel * element size; offsets inside
/// the byte buffer; no overlaps or gaps; no duplicate names.
///
/// Tensors: dtype F32/F16/BF16/I32/I16/I8/U8/F64/I64 (other safetensors dtypes such as BOOL, U16 or
/// F8_* are rejected with "unsupported dtype X for tensor Y"); shape in PyTorch order as stored.
/// TensorView::data points into the read-only mapping, which lives as long as this object.
/// ALIGNMENT: the format does not guarantee it. data is element-aligned in files written by the
/// reference writer (header padded to 8, tensors sorted by alignment), but a foreign file may place a
/// tensor at any byte: check `reinterpret_cast<uintptr_t>(data) % element_size` before casting, or
/// read through memcpy (safe for any alignment).
class SafetensorsFile : public TensorSource {
 public:
  /// Maps and validates `path` (see above). Throws perfx::Error naming the file and the problem:
  /// truncated file, header length past the end or > 100,000,000, invalid/duplicate-key JSON,
  /// a non-object header, unknown/unsupported dtype, bad shape, offsets out of range, a byte span that
  /// does not match the shape, overlapping tensors (both named), gaps or unused trailing bytes, or a
  /// __metadata__ that is not a string map.
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  /// The same validation over `size` bytes in memory (copied); `name` stands for the path in
  /// errors. open() maps the file and goes through the same code.
  static std::unique_ptr<SafetensorsFile> open_memory(const void* data, size_t size,
                                                      const std::string& name);
  const TensorView* find(const std::string& name) const override;
  /// Tensor names in lexicographic order.
  std::vector<std::string> names() const override;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  static std::unique_ptr<SafetensorsFile> parse(MappedFile file);

  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  friend class SafetensorsFolder;
};

/// A checkpoint folder: model.safetensors, or model.safetensors.index.json + the shards it lists.
class SafetensorsFolder : public TensorSource {
 public:
  /// Opens dir/model.safetensors.index.json and every shard its weight_map names (each opened once)
  /// when the index exists, else dir/model.safetensors. Tensors found in a shard but not listed in
  /// the index are served too. Throws perfx::Error when neither file exists, when both exist and
  /// the index does not list model.safetensors (ambiguous: both named), the index is not valid JSON
  /// or has no weight_map object, a shard is missing (named), a listed tensor is absent from its
  /// shard (named), the same tensor is in two shards, or any shard fails SafetensorsFile::open.
  static std::unique_ptr<SafetensorsFolder> open(const std::string& dir);
  const TensorView* find(const std::string& name) const override;
  /// Tensor names of all shards in lexicographic order.
  std::vector<std::string> names() const override;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

/// Writes tensors to a .safetensors file (header padded with spaces so the data starts at a multiple
/// of 8, data in the given order; written to path + ".tmp" then renamed). Each entry's data must hold
/// exactly numel * element-size bytes (nbytes). Throws perfx::Error for a block-quantized dtype
/// (Q8_0/Q4_0/Q4_1 have no safetensors dtype), a size mismatch, a duplicate or reserved name
/// ("__metadata__"), or if the file cannot be written.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace perfx
