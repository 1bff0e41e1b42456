// Helpers for the formats tests: a self-deleting temp folder and byte builders for GGUF and
// safetensors files (corrupt files are built in the tests; no binary fixtures are committed).
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "perfx/status.h"

namespace perfx::test {

/// A fresh folder under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "perfx_formats_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    if (!p) throw std::runtime_error("mkdtemp failed");
    path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), (std::streamsize)bytes.size());
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline void write_text(const std::string& path, const std::string& text) {
  write_bytes(path, text);
}

/// Appends little-endian values to a byte string.
class Bytes {
 public:
  template <class T>
  Bytes& put(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s_.append(b, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& raw(const std::string& b) {
    s_ += b;
    return *this;
  }
  /// GGUF string: u64 length + bytes.
  Bytes& str(const std::string& v) {
    u64(v.size());
    return raw(v);
  }
  Bytes& pad_to(size_t align, char fill = 0) {
    s_.append((align - s_.size() % align) % align, fill);
    return *this;
  }
  size_t size() const { return s_.size(); }
  const std::string& bytes() const { return s_; }
  std::string& bytes() { return s_; }

 private:
  std::string s_;
};

/// GGUF metadata value types (mirrors gguf::ValueType ids).
enum : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBOOL = 7,
  kSTRING = 8,
  kARRAY = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12
};

/// Builds a GGUF file: metadata entries (already-encoded values) and tensors whose data is laid out
/// aligned after the tensor infos.
class GgufBuilder {
 public:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> ne;  // ggml order
    uint32_t type;
    std::string data;
    std::optional<uint64_t> offset_override;  // when set: written as is, data not placed
  };

  uint32_t version = 3;
  uint32_t alignment = 32;
  std::optional<uint64_t> tensor_count_override;
  std::optional<uint64_t> kv_count_override;

  /// Adds a metadata key with type `type` and the value's encoded bytes.
  GgufBuilder& kv(const std::string& key, uint32_t type, const Bytes& value) {
    Bytes b;
    b.str(key).u32(type).raw(value.bytes());
    kvs_.push_back(b.bytes());
    return *this;
  }
  GgufBuilder& kv_u32(const std::string& key, uint32_t v) { return kv(key, kU32, Bytes().u32(v)); }
  GgufBuilder& kv_f32(const std::string& key, float v) { return kv(key, kF32, Bytes().put(v)); }
  GgufBuilder& kv_str(const std::string& key, const std::string& v) {
    return kv(key, kSTRING, Bytes().str(v));
  }
  GgufBuilder& kv_bool(const std::string& key, bool v) { return kv(key, kBOOL, Bytes().u8(v)); }
  GgufBuilder& kv_str_array(const std::string& key, const std::vector<std::string>& v) {
    Bytes b;
    b.u32(kSTRING).u64(v.size());
    for (const auto& s : v) b.str(s);
    return kv(key, kARRAY, b);
  }
  GgufBuilder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                      std::string data, std::optional<uint64_t> offset_override = {}) {
    tensors_.push_back({name, std::move(ne), type, std::move(data), offset_override});
    return *this;
  }

  std::string build() const {
    Bytes b;
    b.raw("GGUF").u32(version);
    b.u64(tensor_count_override ? *tensor_count_override : tensors_.size());
    b.u64(kv_count_override ? *kv_count_override : kvs_.size());
    for (const auto& k : kvs_) b.raw(k);
    uint64_t off = 0;
    std::vector<uint64_t> offs;
    for (const auto& t : tensors_) {
      b.str(t.name).u32((uint32_t)t.ne.size());
      for (uint64_t d : t.ne) b.u64(d);
      b.u32(t.type);
      b.u64(t.offset_override ? *t.offset_override : off);
      offs.push_back(off);
      if (!t.offset_override) {
        off += t.data.size();
        off += (alignment - off % alignment) % alignment;
      }
    }
    if (!tensors_.empty()) b.pad_to(alignment);  // like llama.cpp: no padding without tensors
    const size_t data_start = b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].offset_override) continue;
      std::string& s = b.bytes();
      if (s.size() < data_start + offs[i] + tensors_[i].data.size()) {
        s.resize(data_start + offs[i] + tensors_[i].data.size(), '\0');
      }
      std::memcpy(s.data() + data_start + offs[i], tensors_[i].data.data(),
                  tensors_[i].data.size());
    }
    if (!tensors_.empty()) b.pad_to(alignment);
    return b.bytes();
  }

 private:
  std::vector<std::string> kvs_;
  std::vector<Tensor> tensors_;
};

/// Bytes of a float vector.
inline std::string f32_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

/// Builds a safetensors file from a header JSON text and a data buffer (header used verbatim).
inline std::string safetensors_bytes(const std::string& header, const std::string& buffer) {
  Bytes b;
  b.u64(header.size()).raw(header).raw(buffer);
  return b.bytes();
}

/// Runs `fn`, expects perfx::Error, and returns its message ("" and a test failure otherwise).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const perfx::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected perfx::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected perfx::Error, nothing was thrown";
  return "";
}

}  // namespace perfx::test
