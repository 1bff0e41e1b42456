// GGUF v2/v3 reader (FORMATS.md §4): metadata, tensor infos, alignment; tensors are mmapped.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mmap.h"
#include "core/tensor.h"

namespace perfx::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9,
  U64 = 10, I64 = 11, F64 = 12
};

/// A metadata value. Scalars live in the field that fits their type; arrays in `array`.
struct Value {
  ValueType type = ValueType::U8;
  uint64_t u = 0;      // unsigned ints, bool
  int64_t i = 0;       // signed ints
  double f = 0;        // floats
  std::string s;       // STRING
  ValueType elem_type = ValueType::U8;  // ARRAY
  std::vector<Value> array;             // ARRAY

  /// True for U8..I64 (not BOOL, not floats).
  bool is_int() const;
  int64_t as_int(const std::string& key) const;     // any integer type or bool; else Error naming key
  double as_float(const std::string& key) const;    // any number
  const std::string& as_string(const std::string& key) const;
};

class File : public TensorSource {
 public:
  /// Opens and validates: magic "GGUF", version 2 or 3, counts that fit in the file, strings and
  /// arrays inside the file, n_dims <= 4, known ggml types, offsets aligned and inside the data
  /// section. Every failure is a perfx::Error naming the path and the problem.
  /// Details: "bad magic" shows the 4 bytes found; version 1 -> "GGUF version 1 is not supported";
  /// byte-swapped versions -> "big-endian GGUF files are not supported"; tensor/metadata counts
  /// and array lengths are checked against the bytes left before anything is allocated; duplicate
  /// metadata keys or tensor names are errors; general.alignment (default 32) must be a power of
  /// two; supported tensors must have ne[0] divisible by the block size (32 for Q4_0/Q4_1/Q8_0,
  /// 256 for the K-quants). Supported ggml types -> DType: F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 8,
  /// Q4_K 12, Q5_K 13, Q6_K 14, I8 24, I16 25, I32 26, BF16 30. Tensor data is mmapped and aligned
  /// to general.alignment within the file.
  static std::unique_ptr<File> open(const std::string& path);
  /// The same validation over `size` bytes in memory (copied); `name` stands for the path in
  /// errors. open() maps the file and goes through the same code.
  static std::unique_ptr<File> open_memory(const void* data, size_t size, const std::string& name);

  uint32_t version() const { return version_; }
  const Value* find_value(const std::string& key) const;
  bool has(const std::string& key) const { return find_value(key) != nullptr; }
  std::string get_string(const std::string& key, const std::string& def) const;
  int64_t get_int(const std::string& key, int64_t def) const;
  double get_float(const std::string& key, double def) const;
  bool get_bool(const std::string& key, bool def) const;
  /// Scalar getters return `def` when the key is absent and throw perfx::Error naming the key when
  /// the stored type does not fit (get_bool accepts BOOL or an integer).
  /// Array getters return an empty vector when the key is absent; Error if the type is wrong
  /// (get_int_array also when an element does not fit in int32; get_float_array takes any numbers).
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::vector<int32_t> get_int_array(const std::string& key) const;
  const std::map<std::string, Value>& metadata() const { return kv_; }

  /// Tensors with shape in PyTorch order (ne reversed). Tensors of known but unsupported ggml types
  /// (Q5_0, Q5_1, Q2_K, Q3_K, IQ*, F64, ...) are listed with their name in `unsupported_types()`
  /// and are not returned by find(); a model loader must refuse them (unsupported_type_error).
  const TensorView* find(const std::string& name) const override;
  /// Names of the supported tensors (those find() returns), in file order.
  std::vector<std::string> names() const override;
  const std::map<std::string, uint32_t>& unsupported_types() const { return unsupported_; }
  const std::string& path() const { return file_.path(); }

 private:
  static std::unique_ptr<File> parse(MappedFile file);

  MappedFile file_;
  uint32_t version_ = 0;
  std::map<std::string, Value> kv_;
  std::map<std::string, TensorView> tensors_;
  std::vector<std::string> order_;
  std::map<std::string, uint32_t> unsupported_;
};

/// The ggml name of a type id ("Q5_0", "IQ2_XS", "F64"; "type N" for an unknown id). Never throws.
std::string ggml_type_name(uint32_t type);

/// The error for a tensor of a known ggml type this engine does not load: "tensor 'NAME' in PATH
/// has type Q5_0, which this engine does not load; supported: F32, F16, BF16, ...". Never throws
/// (returns the message).
std::string unsupported_type_error(const File& f, const std::string& name, uint32_t type);

/// Writes a GGUF v3 file with the given metadata and no tensors (e.g. a model's tokenizer.* keys,
/// which Tokenizer::from_gguf reads back). Values are written with their stored types; an ARRAY's
/// elements must all be of its elem_type. Writes through a temporary file and renames it; throws
/// perfx::Error naming the path when the file cannot be written.
void write_metadata_only(const std::string& path, const std::map<std::string, Value>& kv);

}  // namespace perfx::gguf
