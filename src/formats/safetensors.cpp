#include "formats/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "formats/json_strict.h"
#include "perfx/status.h"

namespace perfx {

namespace {

static_assert(std::endian::native == std::endian::little,
              "the safetensors reader assumes a little-endian host");

using json = nlohmann::json;
using formats_detail::json_snippet;

constexpr uint64_t kMaxHeaderLen = 100'000'000;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw Error("safetensors '" + path + "': " + what);
}

// The dtypes this engine reads, and the other dtype strings safetensors defines.
bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> kTable[] = {
      {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
      {"I32", DType::I32}, {"I16", DType::I16}, {"I8", DType::I8},
      {"U8", DType::U8},   {"F64", DType::F64}, {"I64", DType::I64},
  };
  for (const auto& [name, dt] : kTable) {
    if (s == name) {
      *out = dt;
      return true;
    }
  }
  return false;
}

bool is_other_safetensors_dtype(const std::string& s) {
  static const char* kOthers[] = {"BOOL",    "U16",     "U32",     "U64",         "C64",
                                  "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ",
                                  "F4",      "F6_E2M3", "F6_E3M2"};
  for (const char* o : kOthers) {
    if (s == o) return true;
  }
  return false;
}

const char* safetensors_dtype_string(DType t) {
  switch (t) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::I32:
      return "I32";
    case DType::I16:
      return "I16";
    case DType::I8:
      return "I8";
    case DType::U8:
      return "U8";
    case DType::F64:
      return "F64";
    case DType::I64:
      return "I64";
    default:
      return nullptr;  // block-quantized GGUF types have no safetensors dtype
  }
}

// A non-negative integer that fits in int64 (JSON may hold it as signed or unsigned).
bool json_to_index(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return *out <= (uint64_t)INT64_MAX;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = (uint64_t)v;
    return true;
  }
  return false;
}

struct Entry {
  std::string name;
  uint64_t begin = 0, end = 0;
};

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  return parse(MappedFile(path));
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open_memory(const void* data, size_t size,
                                                              const std::string& name) {
  return parse(MappedFile::from_bytes(data, size, name));
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::parse(MappedFile file) {
  auto out = std::unique_ptr<SafetensorsFile>(new SafetensorsFile());
  out->file_ = std::move(file);
  const std::string& path = out->file_.path();
  const uint8_t* base = out->file_.data();
  const uint64_t size = out->file_.size();

  if (size < 8) {
    fail(path, "file is " + std::to_string(size) +
                   " bytes, too short for the 8-byte header length (truncated file?)");
  }
  uint64_t n = 0;
  std::memcpy(&n, base, 8);
  if (n > kMaxHeaderLen) {
    fail(path, "header length " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(kMaxHeaderLen) + " bytes (corrupt or not a safetensors file)");
  }
  if (n > size - 8) {
    fail(path, "header length " + std::to_string(n) + " runs past the end of the file (" +
                   std::to_string(size) + " bytes; header would end at " + std::to_string(8 + n) +
                   ")");
  }
  const char* hbegin = reinterpret_cast<const char*>(base + 8);
  const json header =
      formats_detail::parse_json_no_duplicates(hbegin, hbegin + n, "safetensors '" + path + "'");
  if (!header.is_object()) {
    fail(path, "header is not a JSON object (got " + json_snippet(header) + ")");
  }

  const uint64_t data_start = 8 + n;
  const uint64_t buffer_len = size - data_start;
  const uint8_t* buffer = base + data_start;
  std::vector<Entry> entries;
  entries.reserve(header.size());

  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (info.is_null()) continue;
      if (!info.is_object()) fail(path, "__metadata__ is not an object of strings");
      for (const auto& [mk, mv] : info.items()) {
        if (!mv.is_string()) {
          fail(path, "__metadata__ value for '" + mk + "' is not a string (got " +
                         json_snippet(mv) + ")");
        }
        out->metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!info.is_object()) fail(path, where + ": entry is not an object");
    auto it_dtype = info.find("dtype");
    auto it_shape = info.find("shape");
    auto it_offs = info.find("data_offsets");
    if (it_dtype == info.end() || !it_dtype->is_string()) {
      fail(path, where + ": missing or non-string \"dtype\"");
    }
    if (it_shape == info.end() || !it_shape->is_array()) {
      fail(path, where + ": missing or non-array \"shape\"");
    }
    if (it_offs == info.end() || !it_offs->is_array() || it_offs->size() != 2) {
      fail(path, where + ": \"data_offsets\" must be an array [begin, end]");
    }

    TensorView tv;
    tv.name = name;
    const std::string dts = it_dtype->get<std::string>();
    if (!parse_dtype(dts, &tv.dtype)) {
      if (is_other_safetensors_dtype(dts)) {
        fail(path, "unsupported dtype " + dts + " for tensor '" + name + "'");
      }
      fail(path, "unknown dtype '" + dts + "' for tensor '" + name + "'");
    }

    uint64_t numel = 1;
    bool overflow = false, has_zero = false;
    for (const json& d : *it_shape) {
      uint64_t v = 0;
      if (!json_to_index(d, &v)) {
        fail(path,
             where + ": shape " + json_snippet(*it_shape) + " must hold non-negative integers");
      }
      tv.shape.push_back((int64_t)v);
      // Multiply the non-zero dimensions only (a zero one is applied after the loop): every
      // partial product of the shape, in any order, then fits (as the GGUF reader checks).
      if (v == 0)
        has_zero = true;
      else
        overflow = overflow || __builtin_mul_overflow(numel, v, &numel) ||
                   numel > (uint64_t)std::numeric_limits<int64_t>::max();
    }
    if (has_zero) numel = 0;
    uint64_t expect_bytes = 0;
    overflow = overflow ||
               __builtin_mul_overflow(numel, (uint64_t)dtype_block_bytes(tv.dtype), &expect_bytes);
    if (overflow) fail(path, where + ": shape " + tv.shape_str() + " is too large");

    uint64_t begin = 0, end = 0;
    if (!json_to_index((*it_offs)[0], &begin) || !json_to_index((*it_offs)[1], &end)) {
      fail(path,
           where + ": data_offsets " + json_snippet(*it_offs) + " must be non-negative integers");
    }
    if (end < begin) {
      fail(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] has end < begin");
    }
    if (end > buffer_len) {
      fail(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] out of range: the data buffer holds " + std::to_string(buffer_len) +
                     " bytes (truncated file?)");
    }
    if (end - begin != expect_bytes) {
      fail(path, where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     "] span " + std::to_string(end - begin) + " bytes but " + dts + " shape " +
                     tv.shape_str() + " needs " + std::to_string(expect_bytes));
    }
    tv.data = buffer + begin;
    tv.nbytes = (size_t)(end - begin);
    entries.push_back({name, begin, end});
    out->tensors_.emplace(name, std::move(tv));
  }

  // Sorted by begin, tensors must tile [0, buffer_len) exactly.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < cursor) {
      fail(path, "tensors '" + prev->name + "' [" + std::to_string(prev->begin) + ", " +
                     std::to_string(prev->end) + ") and '" + e.name + "' [" +
                     std::to_string(e.begin) + ", " + std::to_string(e.end) + ") overlap");
    }
    if (e.begin > cursor) {
      fail(path, "gap of " + std::to_string(e.begin - cursor) + " bytes in the data buffer at [" +
                     std::to_string(cursor) + ", " + std::to_string(e.begin) + ")" +
                     (prev ? " between tensors '" + prev->name + "' and '" + e.name + "'"
                           : " before tensor '" + e.name + "'"));
    }
    cursor = e.end;
    prev = &e;
  }
  if (cursor != buffer_len) {
    fail(path, std::to_string(buffer_len - cursor) + " unused bytes at the end of the data buffer" +
                   (prev ? " after tensor '" + prev->name + "'" : std::string(" (no tensors)")));
  }
  return out;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> v;
  v.reserve(tensors_.size());
  for (const auto& kv : tensors_) v.push_back(kv.first);
  return v;
}

// ---------------------------------------------------------------------------------------------
// SafetensorsFolder

std::unique_ptr<SafetensorsFolder> SafetensorsFolder::open(const std::string& dir) {
  auto out = std::unique_ptr<SafetensorsFolder>(new SafetensorsFolder());
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (!is_directory(dir)) throw Error("checkpoint folder '" + dir + "' does not exist");

  if (path_exists(single) && !path_exists(index_path)) {
    out->files_.push_back(SafetensorsFile::open(single));
    for (const auto& [name, tv] : out->files_.back()->tensors_) out->index_[name] = &tv;
    return out;
  }
  if (!path_exists(index_path)) {
    throw Error("checkpoint folder '" + dir +
                "' has neither model.safetensors nor model.safetensors.index.json");
  }

  const std::string text = read_text_file(index_path);
  const std::string origin = "safetensors index '" + index_path + "'";
  const json idx =
      formats_detail::parse_json_no_duplicates(text.data(), text.data() + text.size(), origin);
  if (!idx.is_object()) throw Error(origin + ": not a JSON object");
  auto wm = idx.find("weight_map");
  if (wm == idx.end() || !wm->is_object()) {
    throw Error(origin + ": missing or non-object \"weight_map\"");
  }

  // Shards in order of first appearance; each opened once.
  std::vector<std::string> shard_names;
  std::map<std::string, size_t> shard_of_name;
  std::vector<std::pair<std::string, std::string>> listed;  // tensor -> shard
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string()) {
      throw Error(origin + ": weight_map entry for '" + tensor + "' is not a file name");
    }
    const std::string s = shard.get<std::string>();
    if (s.empty() || s[0] == '/' || s.find("..") != std::string::npos) {
      throw Error(origin + ": weight_map entry for '" + tensor + "' has an invalid shard name '" +
                  s + "'");
    }
    if (!shard_of_name.count(s)) {
      shard_of_name[s] = shard_names.size();
      shard_names.push_back(s);
    }
    listed.emplace_back(tensor, s);
  }

  // A model.safetensors beside an index that does not list it: which one is the model?
  if (path_exists(single) && !shard_of_name.count("model.safetensors")) {
    throw Error("checkpoint folder '" + dir +
                "' holds both model.safetensors and model.safetensors.index.json (whose shards do "
                "not include model.safetensors): it is ambiguous which is the model; remove the "
                "one that does not belong");
  }
  for (const std::string& s : shard_names) {
    const std::string p = dir + "/" + s;
    if (!path_exists(p)) {
      throw Error(origin + ": shard '" + s + "' is missing (expected at '" + p + "')");
    }
    out->files_.push_back(SafetensorsFile::open(p));
  }
  // Every listed tensor must be in its shard.
  for (const auto& [tensor, s] : listed) {
    const SafetensorsFile& f = *out->files_[shard_of_name[s]];
    const TensorView* tv = f.find(tensor);
    if (!tv) {
      throw Error(origin + ": tensor '" + tensor +
                  "' is listed in the index but absent from shard '" + s + "'");
    }
    out->index_[tensor] = tv;
  }
  // Tensors present in a shard but not listed are served too, unless they clash.
  for (size_t i = 0; i < out->files_.size(); ++i) {
    for (const auto& [name, tv] : out->files_[i]->tensors_) {
      auto it = out->index_.find(name);
      if (it == out->index_.end()) {
        out->index_[name] = &tv;
      } else if (it->second != &tv) {
        // (a copy of the name: clang before 16 cannot capture a structured binding)
        const auto ls = std::find_if(listed.begin(), listed.end(),
                                     [&n = name](const auto& p) { return p.first == n; });
        throw Error(origin + ": tensor '" + name + "' appears in shard '" + shard_names[i] +
                    "' and in shard '" + (ls != listed.end() ? ls->second : std::string("?")) +
                    "'");
      }
    }
  }
  return out;
}

const TensorView* SafetensorsFolder::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorsFolder::names() const {
  std::vector<std::string> v;
  v.reserve(index_.size());
  for (const auto& kv : index_) v.push_back(kv.first);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Writer

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) {
    json m = json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const TensorView& t : tensors) {
    const char* dts = safetensors_dtype_string(t.dtype);
    if (!dts) {
      throw Error("write_safetensors '" + path + "': tensor '" + t.name + "' has dtype " +
                  dtype_name(t.dtype) + ", which safetensors cannot store");
    }
    if (t.name == "__metadata__" || !seen.insert(t.name).second) {
      throw Error("write_safetensors '" + path + "': duplicate or reserved tensor name '" + t.name +
                  "'");
    }
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) {
        throw Error("write_safetensors '" + path + "': tensor '" + t.name +
                    "' has a negative dimension in shape " + t.shape_str());
      }
      numel *= (uint64_t)d;
    }
    const uint64_t need = numel * dtype_block_bytes(t.dtype);
    if (need != t.nbytes || (need > 0 && t.data == nullptr)) {
      throw Error("write_safetensors '" + path + "': tensor '" + t.name + "' " + dts + " " +
                  t.shape_str() + " needs " + std::to_string(need) + " bytes but has " +
                  std::to_string(t.nbytes));
    }
    header[t.name] = {
        {"dtype", dts}, {"shape", t.shape}, {"data_offsets", {offset, offset + need}}};
    offset += need;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    // Errors name the file asked for; the temporary beside it is an implementation detail.
    if (!f) throw Error("cannot create '" + path + "': " + std::strerror(errno));
    const uint64_t n = h.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f.write(h.data(), (std::streamsize)h.size());
    for (const TensorView& t : tensors) {
      if (t.nbytes) f.write(static_cast<const char*>(t.data), (std::streamsize)t.nbytes);
    }
    f.flush();
    const int err = errno;  // what the failing write() set (ENOSPC: disk full)
    if (!f) {
      std::remove(tmp.c_str());
      throw Error("writing '" + path + "' failed: " + std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error("cannot write '" + path + "' (renaming its temporary '" + tmp + "'): " + err);
  }
}

}  // namespace perfx
