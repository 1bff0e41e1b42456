// AutoAWQ checkpoint folder writer: shards through formats/ write_safetensors, HF index,
// config.json with quantization_config (FORMATS.md §2.1, §3).
#include "quant/checkpoint_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/dtype.h"
#include "core/mmap.h"
#include "formats/safetensors.h"
#include "perfx/status.h"

namespace perfx::quant {

TensorView OwnedTensor::view() const {
  TensorView v;
  v.name = name;
  v.dtype = dtype;
  v.shape = shape;
  v.data = bytes.data();
  v.nbytes = bytes.size();
  return v;
}

namespace {
int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}
}  // namespace

OwnedTensor f16_tensor(const std::string& name, const float* data, std::vector<int64_t> shape) {
  OwnedTensor t;
  t.name = name;
  t.dtype = DType::F16;
  const int64_t n = numel(shape);
  t.shape = std::move(shape);
  t.bytes.resize(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(data[i]);
    std::memcpy(t.bytes.data() + 2 * i, &h, 2);
  }
  return t;
}

OwnedTensor f16_bits_tensor(const std::string& name, const std::vector<uint16_t>& bits,
                            std::vector<int64_t> shape) {
  check(static_cast<int64_t>(bits.size()) == numel(shape),
        "f16 tensor '" + name + "': size mismatch");
  OwnedTensor t;
  t.name = name;
  t.dtype = DType::F16;
  t.shape = std::move(shape);
  t.bytes.resize(bits.size() * 2);
  std::memcpy(t.bytes.data(), bits.data(), t.bytes.size());
  return t;
}

OwnedTensor i32_tensor(const std::string& name, const std::vector<int32_t>& v,
                       std::vector<int64_t> shape) {
  check(static_cast<int64_t>(v.size()) == numel(shape), "i32 tensor '" + name + "': size mismatch");
  OwnedTensor t;
  t.name = name;
  t.dtype = DType::I32;
  t.shape = std::move(shape);
  t.bytes.resize(v.size() * 4);
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

ShardedWriter::ShardedWriter(std::string dir, size_t max_shard_bytes)
    : dir_(std::move(dir)), max_shard_bytes_(std::max<size_t>(1, max_shard_bytes)) {}

void ShardedWriter::add(OwnedTensor t) {
  check(!finished_, "ShardedWriter: add after finish");
  pending_bytes_ += t.bytes.size();
  total_ += t.bytes.size();
  all_names_.push_back(t.name);
  pending_.push_back(std::move(t));
  if (pending_bytes_ >= max_shard_bytes_) flush();
}

void ShardedWriter::flush() {
  if (pending_.empty()) return;
  std::sort(pending_.begin(), pending_.end(), [](const OwnedTensor& a, const OwnedTensor& b) {
    const size_t ea = dtype_block_bytes(a.dtype), eb = dtype_block_bytes(b.dtype);
    return ea != eb ? ea > eb : a.name < b.name;
  });
  std::vector<TensorView> views;
  std::vector<std::string> names;
  for (const OwnedTensor& t : pending_) {
    views.push_back(t.view());
    names.push_back(t.name);
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "/.model-part-%05zu.safetensors", tmp_names_.size() + 1);
  const std::string path = dir_ + buf;
  write_safetensors(path, views, {{"format", "pt"}});
  tmp_names_.push_back(path);
  shard_tensors_.push_back(std::move(names));
  pending_.clear();
  pending_bytes_ = 0;
}

void ShardedWriter::finish() {
  if (finished_) return;
  {
    std::set<std::string> seen;
    for (const std::string& n : all_names_)
      check(seen.insert(n).second, "checkpoint writer: duplicate tensor '" + n + "'");
  }
  flush();
  finished_ = true;
  const size_t n = tmp_names_.size();
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < n; ++i) {
    std::string name = "model.safetensors";
    if (n > 1) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
      name = buf;
    }
    const std::string dst = dir_ + "/" + name;
    if (std::rename(tmp_names_[i].c_str(), dst.c_str()) != 0)
      throw Error("cannot rename '" + tmp_names_[i] + "' to '" + dst +
                  "': " + std::strerror(errno));
    final_names_.push_back(name);
    for (const std::string& t : shard_tensors_[i]) weight_map[t] = name;
  }
  if (n > 1) {
    nlohmann::ordered_json idx;
    idx["metadata"] = {{"total_size", total_}};
    idx["weight_map"] = weight_map;
    write_text_file(dir_ + "/model.safetensors.index.json", idx.dump(2) + "\n");
  }
}

std::string awq_config_json(const std::string& input_config_json, const AwqConfigJson& q) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(input_config_json);
  } catch (const std::exception& e) {
    throw Error(std::string("config.json is not valid JSON: ") + e.what());
  }
  check(j.is_object(), "config.json is not a JSON object");
  nlohmann::ordered_json qc;
  qc["quant_method"] = "awq";
  qc["zero_point"] = true;
  qc["group_size"] = q.group_size;
  qc["bits"] = q.bits;
  qc["version"] = q.version;
  if (q.modules_to_not_convert.empty())
    qc["modules_to_not_convert"] = nullptr;
  else
    qc["modules_to_not_convert"] = q.modules_to_not_convert;
  j["quantization_config"] = qc;
  j["torch_dtype"] = "float16";
  if (j.contains("dtype")) j["dtype"] = "float16";
  return j.dump(2) + "\n";
}

void write_text_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) {
      const int err = errno;  // before the message's allocations
      throw Error("cannot create '" + tmp + "': " + std::strerror(err));
    }
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
    f.close();  // a small file is written only now: its errors (ENOSPC) show here
    if (!f) {
      const int err = errno;
      std::remove(tmp.c_str());
      throw Error("cannot write '" + tmp + "': " + std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    throw Error("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
}

std::vector<std::string> copy_tokenizer_files(const std::string& src_dir,
                                              const std::string& dst_dir) {
  std::vector<std::string> copied;
  for (const char* name :
       {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
        "generation_config.json", "chat_template.jinja", "vocab.json", "merges.txt",
        "added_tokens.json"}) {
    const std::string src = src_dir + "/" + name;
    if (!path_exists(src)) continue;
    write_text_file(dst_dir + "/" + name, read_text_file(src));
    copied.push_back(name);
  }
  return copied;
}

}  // namespace perfx::quant
