// Read-only memory mapping of a whole file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace perfx {

/// A file mapped read-only into memory. Move-only; unmaps on destruction.
class MappedFile {
 public:
  MappedFile() = default;
  /// Maps `path`. Throws perfx::Error naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  /// A copy of `size` bytes held on the heap (exactly `size` bytes, so a read past the end is an
  /// AddressSanitizer report), named `name` in errors. For parsers fed from memory (fuzz targets).
  static MappedFile from_bytes(const void* data, size_t size, const std::string& name);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  std::unique_ptr<uint8_t[]> owned_;  // from_bytes: the copy data_ points into (else mmapped)
};

/// Advises the kernel to reclaim the pages lying wholly inside [data, data + nbytes)
/// (MADV_PAGEOUT, Linux >= 5.4; elsewhere nothing). Non-destructive: clean file pages of a mmapped
/// checkpoint are dropped and re-read if touched again, anonymous pages stay or go to swap. Used
/// once a tensor has been converted (AWQ repack, quantizer), so the source stops counting toward
/// the resident set. Errors (older kernels) are ignored.
void release_pages(const void* data, size_t nbytes);

/// Reads a whole (small) file into a string. Throws perfx::Error naming the path on failure.
std::string read_text_file(const std::string& path);

/// True when `path` exists (file or directory).
bool path_exists(const std::string& path);
/// True when `path` is a directory.
bool is_directory(const std::string& path);

}  // namespace perfx
