#include "formats/gguf.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include "perfx/status.h"

namespace perfx::gguf {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host");

constexpr uint32_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 16;
// Every array element becomes a Value (~100 bytes); cap the total so a crafted file of a few
// hundred MB cannot make us allocate tens of GB. Real vocabularies hold well under a million
// entries.
constexpr uint64_t kMaxTotalArrayElems = uint64_t(1) << 23;
constexpr uint32_t kMaxDims = 4;

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8:
      return "U8";
    case ValueType::I8:
      return "I8";
    case ValueType::U16:
      return "U16";
    case ValueType::I16:
      return "I16";
    case ValueType::U32:
      return "U32";
    case ValueType::I32:
      return "I32";
    case ValueType::F32:
      return "F32";
    case ValueType::BOOL:
      return "BOOL";
    case ValueType::STRING:
      return "STRING";
    case ValueType::ARRAY:
      return "ARRAY";
    case ValueType::U64:
      return "U64";
    case ValueType::I64:
      return "I64";
    case ValueType::F64:
      return "F64";
  }
  return "?";
}

bool valid_value_type(uint32_t t) {
  return t <= (uint32_t)ValueType::F64;
}

// Smallest encoding of one value of type t (used to bound counts by the bytes left).
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    case ValueType::STRING:
      return 8;  // u64 length
    case ValueType::ARRAY:
      return 4 + 8;  // elem type + count
  }
  return 1;
}

// ggml type ids -> DType for the types this engine reads; name of every known id (for messages).
bool ggml_to_dtype(uint32_t t, DType* out) {
  switch (t) {
    case 0:
      *out = DType::F32;
      return true;
    case 1:
      *out = DType::F16;
      return true;
    case 2:
      *out = DType::Q4_0;
      return true;
    case 3:
      *out = DType::Q4_1;
      return true;
    case 8:
      *out = DType::Q8_0;
      return true;
    case 12:
      *out = DType::Q4_K;
      return true;
    case 13:
      *out = DType::Q5_K;
      return true;
    case 14:
      *out = DType::Q6_K;
      return true;
    case 24:
      *out = DType::I8;
      return true;
    case 25:
      *out = DType::I16;
      return true;
    case 26:
      *out = DType::I32;
      return true;
    case 30:
      *out = DType::BF16;
      return true;
    default:
      return false;
  }
}

const char* const kGgmlTypeNames[] = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
static_assert(sizeof kGgmlTypeNames / sizeof kGgmlTypeNames[0] == 40);

// Known ggml type ids (including ones llama.cpp has since removed: 31-33, 36-38). 4 and 5 were
// never valid in GGUF (Q4_2/Q4_3 were dropped before GGUF existed).
bool ggml_type_known(uint32_t t) {
  return t <= 39 && t != 4 && t != 5;
}

std::string printable4(const uint8_t* b) {
  std::string s;
  char hex[16];
  for (int i = 0; i < 4; ++i) s += (b[i] >= 0x20 && b[i] < 0x7f) ? (char)b[i] : '.';
  s += "' (";
  for (int i = 0; i < 4; ++i) {
    std::snprintf(hex, sizeof hex, i ? " %02x" : "%02x", b[i]);
    s += hex;
  }
  return "'" + s + ")";
}

class Reader {
 public:
  Reader(const uint8_t* data, uint64_t size, const std::string& path)
      : data_(data), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("GGUF '" + path_ + "': " + what);
  }

  // `what` (+ " 'name'" when name is not empty) describes the item in messages; the text is only
  // assembled on failure, so reading large arrays costs no string building.
  void need(uint64_t n, const std::string& what, const std::string& name = {}) const {
    if (n > left()) {
      fail("truncated file: " + describe(what, name) + " needs " + std::to_string(n) +
           " bytes at offset " + std::to_string(pos_) + " but only " + std::to_string(left()) +
           " remain");
    }
  }

  template <class T>
  T read(const std::string& what, const std::string& name = {}) {
    need(sizeof(T), what, name);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what, const std::string& name = {}) {
    need(8, what, name);  // the u64 length
    uint64_t n;
    std::memcpy(&n, data_ + pos_, 8);
    pos_ += 8;
    if (n > left()) {
      fail("string length " + std::to_string(n) + " of " + describe(what, name) + " at offset " +
           std::to_string(pos_ - 8) + " runs past the end of the file (" + std::to_string(left()) +
           " bytes remain)");
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), (size_t)n);
    pos_ += n;
    return s;
  }

 private:
  static std::string describe(const std::string& what, const std::string& name) {
    return name.empty() ? what : what + " '" + name + "'";
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& path_;
};

struct ParseState {
  uint64_t total_array_elems = 0;
};

Value read_value(Reader& r, ValueType t, const std::string& key, int depth, ParseState& st) {
  Value v;
  v.type = t;
  static const std::string what = "value of";
  switch (t) {
    case ValueType::U8:
      v.u = r.read<uint8_t>(what, key);
      break;
    case ValueType::I8:
      v.i = r.read<int8_t>(what, key);
      break;
    case ValueType::U16:
      v.u = r.read<uint16_t>(what, key);
      break;
    case ValueType::I16:
      v.i = r.read<int16_t>(what, key);
      break;
    case ValueType::U32:
      v.u = r.read<uint32_t>(what, key);
      break;
    case ValueType::I32:
      v.i = r.read<int32_t>(what, key);
      break;
    case ValueType::U64:
      v.u = r.read<uint64_t>(what, key);
      break;
    case ValueType::I64:
      v.i = r.read<int64_t>(what, key);
      break;
    case ValueType::F32:
      v.f = r.read<float>(what, key);
      break;
    case ValueType::F64:
      v.f = r.read<double>(what, key);
      break;
    case ValueType::BOOL:
      v.u = r.read<uint8_t>(what, key) != 0;
      break;
    case ValueType::STRING:
      v.s = r.read_string(what, key);
      break;
    case ValueType::ARRAY: {
      if (depth >= kMaxArrayDepth) {
        r.fail("arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " in '" + key + "'");
      }
      const uint32_t et = r.read<uint32_t>("array element type of", key);
      if (!valid_value_type(et)) {
        r.fail("array '" + key + "' has invalid element type " + std::to_string(et));
      }
      v.elem_type = (ValueType)et;
      const uint64_t count = r.read<uint64_t>("array length of", key);
      // Bound the count by the bytes left before allocating anything.
      if (count > r.left() / min_encoded_size(v.elem_type)) {
        r.fail("array '" + key + "' claims " + std::to_string(count) + " elements of type " +
               value_type_name(v.elem_type) + ", more than the " + std::to_string(r.left()) +
               " bytes left in the file can hold");
      }
      st.total_array_elems += count;
      if (st.total_array_elems > kMaxTotalArrayElems) {
        r.fail("metadata arrays hold more than " + std::to_string(kMaxTotalArrayElems) +
               " elements in total (at '" + key + "')");
      }
      v.array.reserve((size_t)count);
      for (uint64_t k = 0; k < count; ++k) {
        v.array.push_back(read_value(r, v.elem_type, key, depth + 1, st));
      }
      break;
    }
  }
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Value

bool Value::is_int() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

static bool is_unsigned(ValueType t) {
  return t == ValueType::U8 || t == ValueType::U16 || t == ValueType::U32 || t == ValueType::U64 ||
         t == ValueType::BOOL;
}

int64_t Value::as_int(const std::string& key) const {
  if (!is_int() && type != ValueType::BOOL) {
    throw Error("GGUF metadata '" + key + "' is " + value_type_name(type) +
                ", expected an integer");
  }
  if (is_unsigned(type)) {
    if (u > (uint64_t)std::numeric_limits<int64_t>::max()) {
      throw Error("GGUF metadata '" + key + "' value " + std::to_string(u) +
                  " does not fit in int64");
    }
    return (int64_t)u;
  }
  return i;
}

double Value::as_float(const std::string& key) const {
  if (type == ValueType::F32 || type == ValueType::F64) return f;
  if (is_int()) return is_unsigned(type) ? (double)u : (double)i;
  throw Error("GGUF metadata '" + key + "' is " + value_type_name(type) + ", expected a number");
}

const std::string& Value::as_string(const std::string& key) const {
  if (type != ValueType::STRING) {
    throw Error("GGUF metadata '" + key + "' is " + value_type_name(type) + ", expected a string");
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// File

std::unique_ptr<File> File::open(const std::string& path) { return parse(MappedFile(path)); }

std::unique_ptr<File> File::open_memory(const void* data, size_t size, const std::string& name) {
  return parse(MappedFile::from_bytes(data, size, name));
}

std::unique_ptr<File> File::parse(MappedFile file) {
  auto out = std::unique_ptr<File>(new File());
  out->file_ = std::move(file);
  const uint8_t* base = out->file_.data();
  const uint64_t size = out->file_.size();
  Reader r(base, size, out->file_.path());

  if (size < 4) r.fail("file is " + std::to_string(size) + " bytes, too short for a GGUF header");
  if (std::memcmp(base, "GGUF", 4) != 0) {
    r.fail("bad magic: expected 'GGUF' (47 47 55 46), got " + printable4(base));
  }
  r.read<uint32_t>("magic");
  const uint32_t version = r.read<uint32_t>("version");
  if (version == 1) r.fail("GGUF version 1 is not supported (only versions 2 and 3)");
  if (version != 2 && version != 3) {
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) {
      r.fail("big-endian GGUF files are not supported (version field reads " +
             std::to_string(version) + ")");
    }
    r.fail("unsupported GGUF version " + std::to_string(version) + " (only versions 2 and 3)");
  }
  out->version_ = version;
  const uint64_t n_tensors = r.read<uint64_t>("tensor count");
  const uint64_t n_kv = r.read<uint64_t>("metadata count");
  // Smallest possible entries: kv = key length (8) + type (4) + 1-byte value;
  // tensor info = name length (8) + n_dims (4) + type (4) + offset (8).
  if (n_kv > r.left() / 13) {
    r.fail("metadata count " + std::to_string(n_kv) + " is implausible: the " +
           std::to_string(r.left()) + " bytes left in the file cannot hold that many entries " +
           "(corrupt header or truncated file)");
  }
  if (n_tensors > r.left() / 24) {
    r.fail("tensor count " + std::to_string(n_tensors) + " is implausible: the " +
           std::to_string(r.left()) + " bytes left in the file cannot hold that many entries " +
           "(corrupt header or truncated file)");
  }

  ParseState st;
  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string key = r.read_string("metadata key #" + std::to_string(k));
    const uint32_t t = r.read<uint32_t>("type of metadata", key);
    if (!valid_value_type(t)) {
      r.fail("metadata '" + key + "' has invalid value type " + std::to_string(t));
    }
    Value v = read_value(r, (ValueType)t, key, 0, st);
    if (!out->kv_.emplace(key, std::move(v)).second) r.fail("duplicate metadata key '" + key + "'");
  }

  uint64_t alignment = kDefaultAlignment;
  if (const Value* a = out->find_value("general.alignment")) {
    if (!a->is_int()) r.fail("general.alignment must be an integer");
    const int64_t av = a->as_int("general.alignment");
    if (av <= 0 || (av & (av - 1)) != 0) {
      r.fail("general.alignment " + std::to_string(av) + " is not a positive power of two");
    }
    alignment = (uint64_t)av;
  }

  struct Info {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
  };
  std::vector<Info> infos;
  infos.reserve((size_t)n_tensors);
  std::set<std::string> seen;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    Info ti;
    ti.name = r.read_string("tensor name #" + std::to_string(k));
    const std::string where = "tensor '" + ti.name + "'";
    if (!seen.insert(ti.name).second) r.fail("duplicate tensor name '" + ti.name + "'");
    const uint32_t n_dims = r.read<uint32_t>("n_dims of " + where);
    if (n_dims > kMaxDims) {
      r.fail(where + " has n_dims " + std::to_string(n_dims) + " (at most " +
             std::to_string(kMaxDims) + " supported)");
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = r.read<uint64_t>("dimensions of " + where);
      if (ne > (uint64_t)std::numeric_limits<int64_t>::max()) {
        r.fail(where + " has dimension " + std::to_string(ne) + " out of range");
      }
      ti.ne.push_back(ne);
    }
    ti.type = r.read<uint32_t>("type of " + where);
    ti.offset = r.read<uint64_t>("offset of " + where);
    if (!ggml_type_known(ti.type)) {
      r.fail(where + " has unknown ggml type " + std::to_string(ti.type));
    }
    infos.push_back(std::move(ti));
  }

  const uint64_t info_end = r.pos();
  const uint64_t data_start = info_end + (alignment - info_end % alignment) % alignment;
  for (const Info& ti : infos) {
    const std::string where = "tensor '" + ti.name + "'";
    if (ti.offset % alignment != 0) {
      r.fail(where + " data offset " + std::to_string(ti.offset) +
             " is not a multiple of the alignment " + std::to_string(alignment));
    }
    // The product of the non-zero dimensions must fit in int64, not only the product of all of
    // them: with a zero dimension first the running product stays 0, yet TensorView::numel()
    // (PyTorch order: ne reversed) and any rows x cols of the shape multiply the large ones first
    // (the fuzzer found {0, 2^38, 2^39} overflowing numel()).
    uint64_t span = 1;
    bool overflow = false, has_zero = false;
    for (uint64_t ne : ti.ne) {
      if (ne == 0)
        has_zero = true;
      else
        overflow = overflow || __builtin_mul_overflow(span, ne, &span);
    }
    if (overflow || span > (uint64_t)std::numeric_limits<int64_t>::max()) {
      r.fail(where + " has too many elements");
    }
    const uint64_t numel = has_zero ? 0 : span;
    // Shape in PyTorch order: ne reversed.
    std::vector<int64_t> shape(ti.ne.rbegin(), ti.ne.rend());
    DType dt;
    if (!ggml_to_dtype(ti.type, &dt)) {
      if (ti.offset > size || data_start > size - ti.offset) {
        r.fail(where + " data offset " + std::to_string(ti.offset) + " lies outside the file");
      }
      out->unsupported_[ti.name] = ti.type;
      continue;
    }
    const uint64_t block = (uint64_t)dtype_block_elems(dt);
    const uint64_t row = ti.ne.empty() ? 1 : ti.ne[0];
    if (row % block != 0) {
      r.fail(where + " (" + dtype_name(dt) + ") row of " + std::to_string(row) +
             " elements is not a multiple of the block size " + std::to_string(block));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel / block, (uint64_t)dtype_block_bytes(dt), &nbytes)) {
      r.fail(where + " is too large");
    }
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_start, ti.offset, &begin) ||
        __builtin_add_overflow(begin, nbytes, &end) || end > size) {
      r.fail(where + " data [" + std::to_string(ti.offset) + ", +" + std::to_string(nbytes) +
             " bytes) starting at file offset " + std::to_string(data_start) +
             " runs past the end of the file (" + std::to_string(size) +
             " bytes; truncated tensor data?)");
    }
    TensorView tv;
    tv.name = ti.name;
    tv.dtype = dt;
    tv.shape = std::move(shape);
    tv.data = base + begin;
    tv.nbytes = (size_t)nbytes;
    out->order_.push_back(ti.name);
    out->tensors_.emplace(ti.name, std::move(tv));
  }
  return out;
}

const Value* File::find_value(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::string File::get_string(const std::string& key, const std::string& def) const {
  const Value* v = find_value(key);
  return v ? v->as_string(key) : def;
}

int64_t File::get_int(const std::string& key, int64_t def) const {
  const Value* v = find_value(key);
  return v ? v->as_int(key) : def;
}

double File::get_float(const std::string& key, double def) const {
  const Value* v = find_value(key);
  return v ? v->as_float(key) : def;
}

bool File::get_bool(const std::string& key, bool def) const {
  const Value* v = find_value(key);
  if (!v) return def;
  if (v->type == ValueType::BOOL) return v->u != 0;
  if (v->is_int()) return v->as_int(key) != 0;
  throw Error("GGUF metadata '" + key + "' is " + value_type_name(v->type) + ", expected a bool");
}

namespace {
const Value* array_of(const File& f, const std::string& key) {
  const Value* v = f.find_value(key);
  if (v && v->type != ValueType::ARRAY) {
    throw Error("GGUF metadata '" + key + "' is " + value_type_name(v->type) +
                ", expected an array");
  }
  return v;
}
}  // namespace

std::vector<std::string> File::get_string_array(const std::string& key) const {
  std::vector<std::string> out;
  const Value* v = array_of(*this, key);
  if (!v) return out;
  if (v->elem_type != ValueType::STRING) {
    throw Error("GGUF metadata '" + key + "' is an array of " + value_type_name(v->elem_type) +
                ", expected strings");
  }
  out.reserve(v->array.size());
  for (const Value& e : v->array) out.push_back(e.s);
  return out;
}

std::vector<float> File::get_float_array(const std::string& key) const {
  std::vector<float> out;
  const Value* v = array_of(*this, key);
  if (!v) return out;
  out.reserve(v->array.size());
  for (const Value& e : v->array) out.push_back((float)e.as_float(key));
  return out;
}

std::vector<int32_t> File::get_int_array(const std::string& key) const {
  std::vector<int32_t> out;
  const Value* v = array_of(*this, key);
  if (!v) return out;
  out.reserve(v->array.size());
  for (const Value& e : v->array) {
    if (!e.is_int()) {
      throw Error("GGUF metadata '" + key + "' is an array of " + value_type_name(e.type) +
                  ", expected integers");
    }
    const int64_t x = e.as_int(key);
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
      throw Error("GGUF metadata '" + key + "' element " + std::to_string(x) +
                  " does not fit in int32");
    }
    out.push_back((int32_t)x);
  }
  return out;
}

namespace {

template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// A value's payload (without its type tag), as read_value() reads it.
void put_value(std::string& out, const Value& v, const std::string& key) {
  switch (v.type) {
    case ValueType::U8:
      return put<uint8_t>(out, (uint8_t)v.u);
    case ValueType::I8:
      return put<int8_t>(out, (int8_t)v.i);
    case ValueType::U16:
      return put<uint16_t>(out, (uint16_t)v.u);
    case ValueType::I16:
      return put<int16_t>(out, (int16_t)v.i);
    case ValueType::U32:
      return put<uint32_t>(out, (uint32_t)v.u);
    case ValueType::I32:
      return put<int32_t>(out, (int32_t)v.i);
    case ValueType::U64:
      return put<uint64_t>(out, v.u);
    case ValueType::I64:
      return put<int64_t>(out, v.i);
    case ValueType::F32:
      return put<float>(out, (float)v.f);
    case ValueType::F64:
      return put<double>(out, v.f);
    case ValueType::BOOL:
      return put<uint8_t>(out, v.u ? 1 : 0);
    case ValueType::STRING:
      return put_string(out, v.s);
    case ValueType::ARRAY:
      put<uint32_t>(out, (uint32_t)v.elem_type);
      put<uint64_t>(out, v.array.size());
      for (const Value& e : v.array) {
        if (e.type != v.elem_type)
          throw Error("GGUF writer: array '" + key + "' mixes element types");
        put_value(out, e, key);
      }
      return;
  }
  throw Error("GGUF writer: '" + key + "' has an invalid value type");
}

}  // namespace

void write_metadata_only(const std::string& path, const std::map<std::string, Value>& kv) {
  std::string out = "GGUF";
  put<uint32_t>(out, 3);          // version
  put<uint64_t>(out, 0);          // tensors
  put<uint64_t>(out, kv.size());  // metadata entries
  for (const auto& [key, v] : kv) {
    put_string(out, key);
    put<uint32_t>(out, (uint32_t)v.type);
    put_value(out, v, key);
  }
  while (out.size() % 32) out.push_back('\0');  // the (empty) data section starts aligned
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("cannot create '" + tmp + "': " + std::strerror(errno));
  const bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  int err = errno;
  if (std::fclose(f) != 0 || !ok) {
    if (ok) err = errno;  // the write failed only when the buffer was flushed
    std::remove(tmp.c_str());
    throw Error("cannot write '" + tmp + "': " + std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno));
}

std::string ggml_type_name(uint32_t type) {
  return type < 40 ? kGgmlTypeNames[type] : "type " + std::to_string(type);
}

std::string unsupported_type_error(const File& f, const std::string& name, uint32_t type) {
  return "tensor '" + name + "' in " + f.path() + " has type " + ggml_type_name(type) +
         ", which this engine does not load; supported: F32, F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, "
         "Q5_K, Q6_K";
}

const TensorView* File::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> File::names() const {
  return order_;
}

}  // namespace perfx::gguf
