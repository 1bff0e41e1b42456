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
class SafetensorsFile : public TensorSource {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  /// Parses from memory already mapped (used by tests). `origin` names the source in errors.
  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  friend class SafetensorsFolder;
};

/// A checkpoint folder: model.safetensors, or model.safetensors.index.json + the shards it lists.
class SafetensorsFolder : public TensorSource {
 public:
  static std::unique_ptr<SafetensorsFolder> open(const std::string& dir);
  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

/// Writes tensors to a .safetensors file (header padded to 8 bytes, data in the given order).
/// Each entry's data must hold nbytes bytes. Throws perfx::Error if the file cannot be written.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace perfx
