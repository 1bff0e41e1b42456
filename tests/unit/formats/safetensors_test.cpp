#include "formats/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "formats_test_util.h"
#include "support/test_support.h"

using namespace perfx;
using perfx::test::error_of;
using perfx::test::safetensors_bytes;
using perfx::test::TempDir;
using perfx::test::write_bytes;
using ::testing::HasSubstr;

namespace {

const char* kModel = "models/stories260K-hf/model.safetensors";
const char* kLogits = "models/stories260K-hf/reference_logits.safetensors";

float f32_at(const TensorView& t, size_t i) {
  float v;
  std::memcpy(&v, static_cast<const uint8_t*>(t.data) + 4 * i, 4);
  return v;
}

// Writes a safetensors file built from a header text + buffer, opens it, returns the error text.
std::string open_error(const std::string& header, const std::string& buffer) {
  TempDir d;
  const std::string p = d.file("bad.safetensors");
  write_bytes(p, safetensors_bytes(header, buffer));
  return error_of([&] { SafetensorsFile::open(p); });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Real fixtures

TEST(Safetensors, Stories260KModel) {
  PERFX_REQUIRE_SHARED(kModel);
  auto f = SafetensorsFile::open(test::shared_path(kModel));
  const auto names = f->names();
  ASSERT_EQ(names.size(), 47u);  // 5 layers x 9 + embed + norm (tied: no lm_head)
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(f->find("lm_head.weight"), nullptr);
  EXPECT_EQ(f->metadata().at("format"), "pt");

  const TensorView* emb = f->find("model.embed_tokens.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->dtype, DType::F32);
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(emb->nbytes, 512u * 64 * 4);
  EXPECT_EQ(emb->numel(), 512 * 64);
  EXPECT_FLOAT_EQ(f32_at(*emb, 0), -0.29474878311157227f);
  EXPECT_FLOAT_EQ(f32_at(*emb, 3), 0.34057360887527466f);

  const TensorView* k = f->find("model.layers.3.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{32, 64}));  // 4 kv heads x head_dim 8
  const TensorView* down = f->find("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{64, 172}));
  const TensorView* norm = f->find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->shape, (std::vector<int64_t>{64}));
  EXPECT_FLOAT_EQ(f32_at(*norm, 0), 2.4583089351654053f);
  EXPECT_FLOAT_EQ(f32_at(*norm, 1), 1.3673226833343506f);
  // Data lies inside the mapping, after the header.
  EXPECT_EQ(static_cast<const uint8_t*>(norm->data) + norm->nbytes,
            static_cast<const uint8_t*>(emb->data) + (1040128 - 0));
}

TEST(Safetensors, Stories260KReferenceLogits) {
  PERFX_REQUIRE_SHARED(kLogits);
  auto f = SafetensorsFile::open(test::shared_path(kLogits));
  EXPECT_EQ(f->names(), (std::vector<std::string>{"input_ids", "logits"}));
  const TensorView* ids = f->find("input_ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::I32);
  EXPECT_EQ(ids->shape, (std::vector<int64_t>{12}));
  std::vector<int32_t> v(12);
  std::memcpy(v.data(), ids->data, 48);
  EXPECT_EQ(v, (std::vector<int32_t>{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315}));
  const TensorView* lg = f->find("logits");
  ASSERT_NE(lg, nullptr);
  EXPECT_EQ(lg->dtype, DType::F32);
  EXPECT_EQ(lg->shape, (std::vector<int64_t>{12, 512}));
  EXPECT_FLOAT_EQ(f32_at(*lg, 0), -6.222912788391113f);
  EXPECT_FLOAT_EQ(f32_at(*lg, 1), 8.404341697692871f);
}

TEST(Safetensors, FolderWithSingleFile) {
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto folder = SafetensorsFolder::open(test::shared_path("models/stories260K-hf"));
  EXPECT_EQ(folder->names().size(), 47u);
  const TensorView* t = folder->find("model.layers.4.self_attn.q_proj.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(folder->find("nope"), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Writer round trips

TEST(Safetensors, WriteReadRoundTripAllDtypes) {
  TempDir d;
  std::vector<float> a(6);
  std::iota(a.begin(), a.end(), 0.5f);
  std::vector<uint16_t> h = {fp32_to_fp16(1.5f), fp32_to_fp16(-2.0f)};
  std::vector<uint16_t> bf = {fp32_to_bf16(3.0f)};
  std::vector<int32_t> i32 = {7, -9, 11};
  std::vector<int16_t> i16 = {-3};
  std::vector<int8_t> i8 = {1, -2, 3, -4, 5};
  std::vector<uint8_t> u8 = {250};
  std::vector<double> f64 = {3.25};
  std::vector<int64_t> i64 = {-(int64_t(1) << 40)};
  std::vector<TensorView> ts = {
      {"a.f32", DType::F32, {2, 3}, a.data(), 24},   {"b.f16", DType::F16, {2}, h.data(), 4},
      {"c.bf16", DType::BF16, {1, 1}, bf.data(), 2}, {"d.i32", DType::I32, {3}, i32.data(), 12},
      {"e.i16", DType::I16, {}, i16.data(), 2},  // scalar
      {"f.i8", DType::I8, {5}, i8.data(), 5},    // odd size: later tensors misaligned
      {"g.u8", DType::U8, {1}, u8.data(), 1},        {"h.f64", DType::F64, {1}, f64.data(), 8},
      {"i.i64", DType::I64, {1}, i64.data(), 8},     {"j.empty", DType::F32, {0, 4}, nullptr, 0},
  };
  const std::string p = d.file("rt.safetensors");
  write_safetensors(p, ts, {{"format", "pt"}, {"note", "x"}});

  // Header is padded so the data starts at a multiple of 8.
  const std::string raw = test::read_file(p);
  uint64_t n;
  std::memcpy(&n, raw.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(raw[8 + n - 1] == ' ' || raw[8 + n - 1] == '}', true);

  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->names().size(), ts.size());
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("note"), "x");
  for (const TensorView& t : ts) {
    const TensorView* r = f->find(t.name);
    ASSERT_NE(r, nullptr) << t.name;
    EXPECT_EQ(r->dtype, t.dtype) << t.name;
    EXPECT_EQ(r->shape, t.shape) << t.name;
    ASSERT_EQ(r->nbytes, t.nbytes) << t.name;
    if (t.nbytes) {
      EXPECT_EQ(std::memcmp(r->data, t.data, t.nbytes), 0) << t.name;
    }
  }
  EXPECT_EQ(f->find("e.i16")->numel(), 1);
  EXPECT_EQ(f->find("j.empty")->numel(), 0);
  // g.u8 follows the 5-byte I8 tensor: its data is at an odd offset; reading via memcpy works.
  uint8_t g;
  std::memcpy(&g, f->find("g.u8")->data, 1);
  EXPECT_EQ(g, 250);
  double x;
  std::memcpy(&x, f->find("h.f64")->data, 8);  // possibly misaligned: memcpy is fine
  EXPECT_EQ(x, 3.25);
}

TEST(Safetensors, WriteRejectsBadInput) {
  TempDir d;
  float v[2] = {1, 2};
  EXPECT_THAT(error_of([&] {
                write_safetensors(d.file("x.safetensors"), {{"t", DType::F32, {3}, v, 8}});
              }),
              HasSubstr("needs 12 bytes but has 8"));
  EXPECT_THAT(error_of([&] {
                write_safetensors(d.file("x.safetensors"), {{"q", DType::Q8_0, {32}, v, 34}});
              }),
              HasSubstr("Q8_0"));
  EXPECT_THAT(error_of([&] {
                write_safetensors(d.file("x.safetensors"),
                                  {{"t", DType::F32, {1}, v, 4}, {"t", DType::F32, {1}, v, 4}});
              }),
              HasSubstr("duplicate"));
  // The error names the file asked for, not the temporary written beside it.
  EXPECT_EQ(error_of([&] { write_safetensors(d.file("nodir/x.safetensors"), {}); }),
            "cannot create '" + d.file("nodir/x.safetensors") + "': No such file or directory");
}

TEST(Safetensors, ShardedFolderRoundTrip) {
  TempDir d;
  std::vector<float> w0 = {1, 2, 3, 4}, w1 = {5, 6}, w2 = {7, 8, 9};
  write_safetensors(d.file("model-00001-of-00002.safetensors"),
                    {{"model.a.weight", DType::F32, {2, 2}, w0.data(), 16},
                     {"model.b.weight", DType::F32, {2}, w1.data(), 8}});
  write_safetensors(d.file("model-00002-of-00002.safetensors"),
                    {{"lm_head.weight", DType::F32, {3, 1}, w2.data(), 12}});
  test::write_text(d.file("model.safetensors.index.json"), R"({
    "metadata": {"total_size": 36, "extra": "ignored"},
    "weight_map": {
      "model.a.weight": "model-00001-of-00002.safetensors",
      "model.b.weight": "model-00001-of-00002.safetensors",
      "lm_head.weight": "model-00002-of-00002.safetensors"
    }})");
  auto f = SafetensorsFolder::open(d.path());
  EXPECT_EQ(f->names(),
            (std::vector<std::string>{"lm_head.weight", "model.a.weight", "model.b.weight"}));
  const TensorView* t = f->find("lm_head.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{3, 1}));
  float x;
  std::memcpy(&x, static_cast<const float*>(t->data) + 2, 4);
  EXPECT_EQ(x, 9.0f);
  const TensorView* a = f->find("model.a.weight");
  ASSERT_NE(a, nullptr);
  std::memcpy(&x, static_cast<const float*>(a->data) + 3, 4);
  EXPECT_EQ(x, 4.0f);
}

// Issue 8: a valid sharded checkpoint plus a stray model.safetensors used to load the stray file.
// It is ambiguous (both named); an index that lists model.safetensors as its shard is not.
TEST(Safetensors, ShardedFolderWithAStrayModelSafetensorsIsAmbiguous) {
  std::vector<float> w = {1, 2}, stray = {9, 9};
  {
    TempDir d;
    write_safetensors(d.file("model-00001-of-00001.safetensors"),
                      {{"a", DType::F32, {2}, w.data(), 8}});
    test::write_text(d.file("model.safetensors.index.json"),
                     R"({"weight_map": {"a": "model-00001-of-00001.safetensors"}})");
    ASSERT_NE(SafetensorsFolder::open(d.path())->find("a"), nullptr);
    write_safetensors(d.file("model.safetensors"), {{"a", DType::F32, {2}, stray.data(), 8}});
    const std::string e = error_of([&] { SafetensorsFolder::open(d.path()); });
    EXPECT_THAT(e, HasSubstr("holds both model.safetensors and model.safetensors.index.json"));
  }
  {
    TempDir d;
    write_safetensors(d.file("model.safetensors"), {{"a", DType::F32, {2}, w.data(), 8}});
    test::write_text(d.file("model.safetensors.index.json"),
                     R"({"weight_map": {"a": "model.safetensors"}})");
    auto folder = SafetensorsFolder::open(d.path());
    const TensorView* t = folder->find("a");
    ASSERT_NE(t, nullptr);
    float x;
    std::memcpy(&x, t->data, 4);
    EXPECT_EQ(x, 1.0f);
  }
}

TEST(Safetensors, ShardedFolderErrors) {
  std::vector<float> w = {1, 2};
  {  // index names a shard that does not exist
    TempDir d;
    write_safetensors(d.file("model-00001-of-00002.safetensors"),
                      {{"a", DType::F32, {2}, w.data(), 8}});
    test::write_text(d.file("model.safetensors.index.json"),
                     R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                        "b": "model-00002-of-00002.safetensors"}})");
    const std::string e = error_of([&] { SafetensorsFolder::open(d.path()); });
    EXPECT_THAT(e, HasSubstr("shard 'model-00002-of-00002.safetensors' is missing"));
  }
  {  // index lists a tensor its shard does not hold
    TempDir d;
    write_safetensors(d.file("s1.safetensors"), {{"a", DType::F32, {2}, w.data(), 8}});
    test::write_text(d.file("model.safetensors.index.json"),
                     R"({"weight_map": {"a": "s1.safetensors", "ghost": "s1.safetensors"}})");
    const std::string e = error_of([&] { SafetensorsFolder::open(d.path()); });
    EXPECT_THAT(e, HasSubstr("tensor 'ghost' is listed in the index but absent from shard "
                             "'s1.safetensors'"));
  }
  {  // the same tensor in two shards
    TempDir d;
    write_safetensors(d.file("s1.safetensors"), {{"a", DType::F32, {2}, w.data(), 8}});
    write_safetensors(d.file("s2.safetensors"),
                      {{"a", DType::F32, {2}, w.data(), 8}, {"b", DType::F32, {2}, w.data(), 8}});
    test::write_text(d.file("model.safetensors.index.json"),
                     R"({"weight_map": {"a": "s1.safetensors", "b": "s2.safetensors"}})");
    EXPECT_THAT(error_of([&] { SafetensorsFolder::open(d.path()); }),
                HasSubstr("tensor 'a' appears in shard"));
  }
  {  // no weight_map
    TempDir d;
    test::write_text(d.file("model.safetensors.index.json"), R"({"metadata": {}})");
    EXPECT_THAT(error_of([&] { SafetensorsFolder::open(d.path()); }), HasSubstr("weight_map"));
  }
  {  // path escaping the folder
    TempDir d;
    test::write_text(d.file("model.safetensors.index.json"),
                     R"({"weight_map": {"a": "../evil.safetensors"}})");
    EXPECT_THAT(error_of([&] { SafetensorsFolder::open(d.path()); }),
                HasSubstr("invalid shard name"));
  }
  {  // empty folder
    TempDir d;
    EXPECT_THAT(error_of([&] { SafetensorsFolder::open(d.path()); }),
                HasSubstr("neither model.safetensors nor model.safetensors.index.json"));
  }
  EXPECT_THAT(error_of([&] { SafetensorsFolder::open("/nonexistent/perfx/dir"); }),
              HasSubstr("does not exist"));
}

// ---------------------------------------------------------------------------------------------
// Corrupt files: each must raise a perfx::Error naming the problem.

TEST(SafetensorsCorrupt, TruncatedFile) {
  TempDir d;
  write_bytes(d.file("t.safetensors"), std::string("\x10\x00\x00", 3));
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(d.file("t.safetensors")); }),
              HasSubstr("too short"));
  write_bytes(d.file("e.safetensors"), "");
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(d.file("e.safetensors")); }),
              HasSubstr("too short"));
}

TEST(SafetensorsCorrupt, TruncatedData) {
  // A valid file cut short: the last tensor's end is now out of range.
  TempDir d;
  std::vector<float> w(8, 1.0f);
  const std::string p = d.file("ok.safetensors");
  write_safetensors(p, {{"a", DType::F32, {8}, w.data(), 32}});
  std::string raw = test::read_file(p);
  raw.resize(raw.size() - 4);
  write_bytes(p, raw);
  // The message says what most likely happened (a fresh user cut a file mid-data: no hint).
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(p); }),
              HasSubstr("out of range: the data buffer holds 28 bytes (truncated file?)"));
}

TEST(SafetensorsCorrupt, HeaderLengthPastEnd) {
  TempDir d;
  test::Bytes b;
  b.u64(1000).raw("{}");
  write_bytes(d.file("h.safetensors"), b.bytes());
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(d.file("h.safetensors")); }),
              HasSubstr("header length 1000 runs past the end of the file"));
}

TEST(SafetensorsCorrupt, HeaderLengthHuge) {
  TempDir d;
  test::Bytes b;
  b.u64(uint64_t(1) << 62).raw("{}");
  write_bytes(d.file("h.safetensors"), b.bytes());
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(d.file("h.safetensors")); }),
              HasSubstr("exceeds the limit of 100000000"));
}

TEST(SafetensorsCorrupt, HeaderLength8BytesShort) {
  // The header length claims 8 bytes fewer than the real JSON: the JSON is cut mid-object.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string buffer(8, '\0');
  test::Bytes b;
  b.u64(header.size() - 8).raw(header).raw(buffer);
  TempDir d;
  write_bytes(d.file("s.safetensors"), b.bytes());
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(d.file("s.safetensors")); }),
              HasSubstr("invalid JSON"));
}

TEST(SafetensorsCorrupt, BadJson) {
  EXPECT_THAT(open_error(R"({"a": {"dtype": "F32", )", ""), HasSubstr("invalid JSON"));
  EXPECT_THAT(open_error("{\"a\xff\": 1}", ""), HasSubstr("invalid JSON"));  // bad UTF-8
}

TEST(SafetensorsCorrupt, NotAnObject) {
  EXPECT_THAT(open_error("[1, 2, 3]", ""), HasSubstr("header is not a JSON object"));
  EXPECT_THAT(open_error(R"({"a": 5})", ""), HasSubstr("tensor 'a': entry is not an object"));
  EXPECT_THAT(open_error(R"({"a": {"shape": [1], "data_offsets": [0, 4]}})", std::string(4, 0)),
              HasSubstr("dtype"));
  EXPECT_THAT(open_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})",
                         std::string(4, 0)),
              HasSubstr("data_offsets"));
}

TEST(SafetensorsCorrupt, OffsetsOutOfRange) {
  const std::string e = open_error(
      R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", std::string(8, 0));
  EXPECT_THAT(e, HasSubstr("tensor 'w'"));
  EXPECT_THAT(e, HasSubstr("out of range: the data buffer holds 8 bytes"));
  EXPECT_THAT(open_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})",
                         std::string(8, 0)),
              HasSubstr("end < begin"));
  EXPECT_THAT(open_error(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})",
                         std::string(8, 0)),
              HasSubstr("non-negative"));
}

TEST(SafetensorsCorrupt, SpanDoesNotMatchShape) {
  const std::string e = open_error(
      R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 8]}})", std::string(8, 0));
  EXPECT_THAT(e, HasSubstr("tensor 'w'"));
  EXPECT_THAT(e, HasSubstr("span 8 bytes but BF16 shape [2, 3] needs 12"));
}

TEST(SafetensorsCorrupt, Overlap) {
  const std::string e = open_error(
      R"({"first": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "second": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
      std::string(12, 0));
  EXPECT_THAT(e, HasSubstr("'first' [0, 8)"));
  EXPECT_THAT(e, HasSubstr("'second' [4, 12)"));
  EXPECT_THAT(e, HasSubstr("overlap"));
}

TEST(SafetensorsCorrupt, Gap) {
  const std::string e = open_error(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
      std::string(12, 0));
  EXPECT_THAT(e, HasSubstr("gap of 4 bytes"));
  EXPECT_THAT(e, HasSubstr("between tensors 'a' and 'b'"));
  EXPECT_THAT(open_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                         std::string(8, 0)),
              HasSubstr("before tensor 'a'"));
  EXPECT_THAT(open_error(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                         std::string(8, 0)),
              HasSubstr("4 unused bytes at the end of the data buffer after tensor 'a'"));
}

TEST(SafetensorsCorrupt, UnknownAndUnsupportedDtype) {
  EXPECT_THAT(open_error(R"({"m": {"dtype": "BOOL", "shape": [4], "data_offsets": [0, 4]}})",
                         std::string(4, 0)),
              HasSubstr("unsupported dtype BOOL for tensor 'm'"));
  EXPECT_THAT(open_error(R"({"m": {"dtype": "F8_E4M3", "shape": [4], "data_offsets": [0, 4]}})",
                         std::string(4, 0)),
              HasSubstr("unsupported dtype F8_E4M3 for tensor 'm'"));
  EXPECT_THAT(open_error(R"({"m": {"dtype": "Q7", "shape": [4], "data_offsets": [0, 4]}})",
                         std::string(4, 0)),
              HasSubstr("unknown dtype 'Q7' for tensor 'm'"));
}

TEST(SafetensorsCorrupt, BadShape) {
  EXPECT_THAT(open_error(R"({"m": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}})", ""),
              HasSubstr("non-negative integers"));
  EXPECT_THAT(open_error(R"({"m": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 0]}})", ""),
              HasSubstr("non-negative integers"));
  EXPECT_THAT(open_error(R"({"m": {"dtype": "F64", "shape": [4294967296, 4294967296, 4294967296],
                                   "data_offsets": [0, 0]}})",
                         ""),
              HasSubstr("too large"));
  // A zero dimension does not hide huge others (was accepted when the zero came first, leaving
  // shape[1] * shape[2] to overflow in any code that multiplies part of the shape).
  EXPECT_THAT(open_error(R"({"m": {"dtype": "U8", "shape": [0, 4294967296, 4294967296],
                                   "data_offsets": [0, 0]}})",
                         ""),
              HasSubstr("too large"));
}

TEST(SafetensorsCorrupt, DuplicateKey) {
  const std::string e = open_error(
      R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
          "w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      std::string(8, 0));
  EXPECT_THAT(e, HasSubstr("duplicate key 'w'"));
  // Duplicates inside a nested object are caught too.
  EXPECT_THAT(open_error(R"({"w": {"dtype": "F32", "dtype": "F32", "shape": [1],
                                   "data_offsets": [0, 4]}})",
                         std::string(4, 0)),
              HasSubstr("duplicate key 'dtype'"));
}

TEST(SafetensorsCorrupt, BadMetadata) {
  EXPECT_THAT(open_error(R"({"__metadata__": {"format": 1}})", ""),
              HasSubstr("__metadata__ value for 'format' is not a string"));
  EXPECT_THAT(open_error(R"({"__metadata__": [1]})", ""), HasSubstr("__metadata__ is not"));
}

TEST(Safetensors, EdgeCasesAccepted) {
  // Whitespace padding around the object, zero-size tensors sharing an offset, null metadata.
  TempDir d;
  const std::string p = d.file("ok.safetensors");
  write_bytes(p, safetensors_bytes(
                     R"(  {"__metadata__": null,
                          "z": {"dtype": "F16", "shape": [0], "data_offsets": [0, 0]},
                          "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}    )",
                     std::string(4, 1)));
  auto f = SafetensorsFile::open(p);
  EXPECT_EQ(f->names(), (std::vector<std::string>{"a", "z"}));
  EXPECT_EQ(f->find("z")->nbytes, 0u);
  EXPECT_TRUE(f->metadata().empty());
  // Empty header + empty buffer.
  write_bytes(p, safetensors_bytes("{}", ""));
  EXPECT_TRUE(SafetensorsFile::open(p)->names().empty());
}

TEST(SafetensorsCorrupt, MissingFile) {
  EXPECT_THAT(error_of([] { SafetensorsFile::open("/nonexistent/perfx.safetensors"); }),
              HasSubstr("/nonexistent/perfx.safetensors"));
}

TEST(SafetensorsCorrupt, RandomMutationsNeverCrash) {
  TempDir d;
  std::vector<float> w(6, 1.0f);
  std::vector<int32_t> ids = {1, 2, 3};
  const std::string p = d.file("m.safetensors");
  write_safetensors(
      p, {{"w", DType::F32, {2, 3}, w.data(), 24}, {"ids", DType::I32, {3}, ids.data(), 12}},
      {{"format", "pt"}});
  const std::string good = test::read_file(p);
  uint32_t rng = 777;
  auto next = [&] { return rng = rng * 1664525u + 1013904223u; };
  int opened = 0, rejected = 0;
  for (int it = 0; it < 300; ++it) {
    std::string m = good;
    const int flips = 1 + (int)(next() % 3);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = next() % (m.size() - 36);  // the length prefix and the JSON header
      m[pos] = (char)(next() >> 24);
    }
    write_bytes(p, m);
    try {
      auto f = SafetensorsFile::open(p);
      for (const auto& n : f->names()) ASSERT_NE(f->find(n), nullptr);
      ++opened;
    } catch (const perfx::Error&) {
      ++rejected;
    }
  }
  EXPECT_EQ(opened + rejected, 300);
  EXPECT_GT(rejected, 30);
}
