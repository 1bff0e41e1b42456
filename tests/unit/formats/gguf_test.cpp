#include "formats/gguf.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "formats/safetensors.h"
#include "formats_test_util.h"
#include "support/test_support.h"

using namespace perfx;
using perfx::test::Bytes;
using perfx::test::error_of;
using perfx::test::GgufBuilder;
using perfx::test::TempDir;
using perfx::test::write_bytes;
using ::testing::HasSubstr;
namespace tb = perfx::test;

namespace {

const char* kStories = "models/stories260K/stories260K.gguf";
const char* kVocab = "tokenizers/llama2/ggml-vocab-llama-spm.gguf";

std::unique_ptr<gguf::File> open_built(const TempDir& d, const std::string& bytes) {
  const std::string p = d.file("t.gguf");
  write_bytes(p, bytes);
  return gguf::File::open(p);
}

std::string built_error(const std::string& bytes) {
  TempDir d;
  return error_of([&] { open_built(d, bytes); });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Real fixtures

TEST(Gguf, Stories260KMetadata) {
  PERFX_REQUIRE_SHARED(kStories);
  auto f = gguf::File::open(test::shared_path(kStories));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 19u);
  EXPECT_EQ(f->get_string("general.architecture", ""), "llama");
  EXPECT_EQ(f->get_string("tokenizer.ggml.model", ""), "llama");
  EXPECT_EQ(f->get_int("llama.block_count", 0), 5);
  EXPECT_EQ(f->get_int("llama.context_length", 0), 2048);
  EXPECT_EQ(f->get_int("llama.embedding_length", 0), 64);
  EXPECT_EQ(f->get_int("llama.feed_forward_length", 0), 172);
  EXPECT_EQ(f->get_int("llama.attention.head_count", 0), 8);
  EXPECT_EQ(f->get_int("llama.attention.head_count_kv", 0), 4);
  EXPECT_EQ(f->get_int("llama.rope.dimension_count", 0), 8);
  EXPECT_FLOAT_EQ((float)f->get_float("llama.attention.layer_norm_rms_epsilon", 0), 1e-5f);
  EXPECT_EQ(f->get_int("tokenizer.ggml.bos_token_id", -1), 1);
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id", -1), 2);
  EXPECT_EQ(f->get_int("tokenizer.ggml.padding_token_id", 0), 4294967295LL);  // u32 "none"
  EXPECT_EQ(f->get_int("absent.key", 77), 77);
  EXPECT_TRUE(f->has("tokenizer.ggml.scores"));
  EXPECT_FALSE(f->has("llama.rope.freq_base"));

  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores").size(), 512u);
  const auto types = f->get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(types[0], 2);  // unknown
  EXPECT_EQ(types[1], 3);  // control
  EXPECT_TRUE(f->get_string_array("absent.array").empty());

  // Typed getters refuse the wrong type, naming the key.
  EXPECT_THAT(error_of([&] { f->get_int("general.architecture", 0); }),
              HasSubstr("'general.architecture' is STRING, expected an integer"));
  EXPECT_THAT(error_of([&] { f->get_string("llama.block_count", ""); }),
              HasSubstr("'llama.block_count' is U32, expected a string"));
  EXPECT_THAT(error_of([&] { f->get_string_array("tokenizer.ggml.scores"); }),
              HasSubstr("array of F32, expected strings"));
  EXPECT_THAT(error_of([&] { f->get_int_array("tokenizer.ggml.model"); }),
              HasSubstr("expected an array"));
}

TEST(Gguf, Stories260KTensors) {
  PERFX_REQUIRE_SHARED(kStories);
  auto f = gguf::File::open(test::shared_path(kStories));
  const auto names = f->names();
  // 5 layers x 9 + token_embd + output_norm + output (this GGUF stores output.weight explicitly).
  ASSERT_EQ(names.size(), 48u);
  EXPECT_EQ(names[0], "token_embd.weight");  // file order
  EXPECT_EQ(names[1], "output_norm.weight");
  EXPECT_EQ(names[2], "output.weight");
  EXPECT_TRUE(f->unsupported_types().empty());
  for (const auto& n : names) {
    const TensorView* t = f->find(n);
    ASSERT_NE(t, nullptr) << n;
    EXPECT_EQ(t->dtype, DType::F32) << n;
    EXPECT_EQ(t->nbytes, (size_t)t->numel() * 4) << n;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 32, 0u) << n;  // aligned in the mapping
  }
  const TensorView* emb = f->find("token_embd.weight");
  EXPECT_EQ(emb->shape, (std::vector<int64_t>{512, 64}));  // ne = [64, 512] reversed
  EXPECT_EQ(f->find("blk.0.attn_k.weight")->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(f->find("blk.2.ffn_down.weight")->shape, (std::vector<int64_t>{64, 172}));
  EXPECT_EQ(f->find("blk.2.ffn_gate.weight")->shape, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(f->find("output_norm.weight")->shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(f->find("blk.0.attn_q_norm.weight"), nullptr);
  float x;
  std::memcpy(&x, emb->data, 4);
  EXPECT_FLOAT_EQ(x, -0.29474878311157227f);
}

TEST(Gguf, Stories260KMatchesHfSafetensors) {
  // The GGUF and HF checkpoints hold the same embedding and final norm, bit for bit.
  PERFX_REQUIRE_SHARED(kStories);
  PERFX_REQUIRE_SHARED("models/stories260K-hf/model.safetensors");
  auto g = gguf::File::open(test::shared_path(kStories));
  auto s = SafetensorsFile::open(test::shared_path("models/stories260K-hf/model.safetensors"));
  const TensorView* ge = g->find("token_embd.weight");
  const TensorView* se = s->find("model.embed_tokens.weight");
  ASSERT_TRUE(ge && se);
  ASSERT_EQ(ge->shape, se->shape);
  EXPECT_EQ(std::memcmp(ge->data, se->data, se->nbytes), 0);
  const TensorView* gn = g->find("output_norm.weight");
  const TensorView* sn = s->find("model.norm.weight");
  ASSERT_TRUE(gn && sn);
  EXPECT_EQ(std::memcmp(gn->data, sn->data, sn->nbytes), 0);
}

TEST(Gguf, Llama2VocabNoTensors) {
  PERFX_REQUIRE_SHARED(kVocab);
  // This file ends right after the metadata: the aligned data section would start past EOF, which
  // is fine with zero tensors.
  auto f = gguf::File::open(test::shared_path(kVocab));
  EXPECT_TRUE(f->names().empty());
  EXPECT_EQ(f->get_string("tokenizer.ggml.pre", ""), "default");
  EXPECT_EQ(f->get_int("llama.vocab_size", 0), 32000);
  EXPECT_EQ(f->get_int("llama.block_count", 0), 32);
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 32000u);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(f->get_float_array("tokenizer.ggml.scores").size(), 32000u);
  EXPECT_EQ(f->get_int_array("tokenizer.ggml.token_type").size(), 32000u);
  EXPECT_TRUE(f->get_bool("tokenizer.ggml.add_bos_token", false));
  EXPECT_FALSE(f->get_bool("tokenizer.ggml.add_eos_token", true));
  EXPECT_TRUE(f->get_bool("absent", true));
}

// ---------------------------------------------------------------------------------------------
// Synthetic files

TEST(Gguf, AllValueTypesAndNestedArrays) {
  GgufBuilder b;
  b.kv("v.u8", tb::kU8, Bytes().u8(200))
      .kv("v.i8", tb::kI8, Bytes().put<int8_t>(-100))
      .kv("v.u16", tb::kU16, Bytes().put<uint16_t>(60000))
      .kv("v.i16", tb::kI16, Bytes().put<int16_t>(-30000))
      .kv("v.u32", tb::kU32, Bytes().u32(4000000000u))
      .kv("v.i32", tb::kI32, Bytes().put<int32_t>(-2000000000))
      .kv("v.f32", tb::kF32, Bytes().put<float>(1.5f))
      .kv_bool("v.bool", true)
      .kv_str("v.str", "héllo")
      .kv("v.u64", tb::kU64, Bytes().u64(uint64_t(1) << 50))
      .kv("v.i64", tb::kI64, Bytes().put<int64_t>(-(int64_t(1) << 50)))
      .kv("v.f64", tb::kF64, Bytes().put<double>(-2.25))
      .kv_str("v.empty", "");
  // [[1, 2], [3]] as ARRAY of ARRAY of I32.
  Bytes nested;
  nested.u32(tb::kARRAY).u64(2);
  nested.u32(tb::kI32).u64(2).put<int32_t>(1).put<int32_t>(2);
  nested.u32(tb::kI32).u64(1).put<int32_t>(3);
  b.kv("v.nested", tb::kARRAY, nested);
  b.kv("v.i32arr", tb::kARRAY,
       Bytes().u32(tb::kI32).u64(3).put<int32_t>(-1).put<int32_t>(0).put<int32_t>(7));
  b.kv("v.u32big", tb::kARRAY, Bytes().u32(tb::kU32).u64(1).u32(4000000000u));
  b.kv("v.emptyarr", tb::kARRAY, Bytes().u32(tb::kF32).u64(0));
  TempDir d;
  auto f = open_built(d, b.build());
  EXPECT_EQ(f->get_int("v.u8", 0), 200);
  EXPECT_EQ(f->get_int("v.i8", 0), -100);
  EXPECT_EQ(f->get_int("v.u16", 0), 60000);
  EXPECT_EQ(f->get_int("v.i16", 0), -30000);
  EXPECT_EQ(f->get_int("v.u32", 0), 4000000000LL);
  EXPECT_EQ(f->get_int("v.i32", 0), -2000000000);
  EXPECT_EQ(f->get_float("v.f32", 0), 1.5);
  EXPECT_EQ(f->get_float("v.u32", 0), 4e9);  // ints read as floats
  EXPECT_TRUE(f->get_bool("v.bool", false));
  EXPECT_EQ(f->get_int("v.bool", 0), 1);
  EXPECT_EQ(f->get_string("v.str", ""), "héllo");
  EXPECT_EQ(f->get_string("v.empty", "x"), "");
  EXPECT_EQ(f->get_int("v.u64", 0), int64_t(1) << 50);
  EXPECT_EQ(f->get_int("v.i64", 0), -(int64_t(1) << 50));
  EXPECT_EQ(f->get_float("v.f64", 0), -2.25);
  EXPECT_TRUE(f->find_value("v.u8")->is_int());
  EXPECT_FALSE(f->find_value("v.f32")->is_int());
  EXPECT_THAT(error_of([&] { f->get_int("v.f32", 0); }), HasSubstr("'v.f32' is F32"));
  EXPECT_THAT(error_of([&] { f->get_float("v.str", 0); }), HasSubstr("expected a number"));
  EXPECT_THAT(error_of([&] { f->get_bool("v.str", false); }), HasSubstr("expected a bool"));

  const gguf::Value* n = f->find_value("v.nested");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->type, gguf::ValueType::ARRAY);
  EXPECT_EQ(n->elem_type, gguf::ValueType::ARRAY);
  ASSERT_EQ(n->array.size(), 2u);
  ASSERT_EQ(n->array[0].array.size(), 2u);
  EXPECT_EQ(n->array[0].elem_type, gguf::ValueType::I32);
  EXPECT_EQ(n->array[0].array[1].as_int("x"), 2);
  EXPECT_EQ(n->array[1].array[0].as_int("x"), 3);
  EXPECT_THAT(error_of([&] { f->get_int_array("v.nested"); }), HasSubstr("expected integers"));
  EXPECT_EQ(f->get_int_array("v.i32arr"), (std::vector<int32_t>{-1, 0, 7}));
  EXPECT_EQ(f->get_float_array("v.i32arr"), (std::vector<float>{-1, 0, 7}));
  EXPECT_THAT(error_of([&] { f->get_int_array("v.u32big"); }), HasSubstr("does not fit in int32"));
  EXPECT_TRUE(f->get_float_array("v.emptyarr").empty());
  EXPECT_TRUE(f->names().empty());
}

TEST(Gguf, TensorTypesShapesAndAlignment) {
  GgufBuilder b;
  b.alignment = 64;
  b.kv_u32("general.alignment", 64);
  std::string q8(2 * 34, '\x11');    // Q8_0: ne0 = 64 -> 2 blocks x 1 row
  std::string q4_0(3 * 18, '\x22');  // Q4_0: ne = [32, 3]
  std::string q4_1(20, '\x33');      // Q4_1: ne = [32]
  b.tensor("f32", {3, 2}, 0, tb::f32_bytes({1, 2, 3, 4, 5, 6}))
      .tensor("f16", {4}, 1, std::string(8, '\x01'))
      .tensor("q4_0", {32, 3}, 2, q4_0)
      .tensor("q4_1", {32}, 3, q4_1)
      .tensor("q8_0", {64, 1, 1, 1}, 8, q8)
      .tensor("i8", {5}, 24, std::string(5, '\x05'))
      .tensor("i16", {2}, 25, std::string(4, '\x06'))
      .tensor("i32", {1}, 26, std::string(4, '\x07'))
      .tensor("bf16", {2, 2}, 30, std::string(8, '\x08'))
      .tensor("q4_k", {256, 2}, 12, std::string(2 * 144, '\x09'))
      .tensor("q5_k", {256}, 13, std::string(176, '\x0b'))
      .tensor("q6_k", {512}, 14, std::string(2 * 210, '\x0c'))
      .tensor("q2_k", {256}, 10, std::string(84, '\x0d'))
      .tensor("iq2", {256}, 16, std::string(66, '\x0a'));
  TempDir d;
  auto f = open_built(d, b.build());
  EXPECT_EQ(f->names(), (std::vector<std::string>{"f32", "f16", "q4_0", "q4_1", "q8_0", "i8", "i16",
                                                  "i32", "bf16", "q4_k", "q5_k", "q6_k"}));
  auto check = [&](const char* name, DType dt, std::vector<int64_t> shape, size_t nbytes) {
    const TensorView* t = f->find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, dt) << name;
    EXPECT_EQ(t->shape, shape) << name;
    EXPECT_EQ(t->nbytes, nbytes) << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 64, 0u) << name;
  };
  check("f32", DType::F32, {2, 3}, 24);
  check("f16", DType::F16, {4}, 8);
  check("q4_0", DType::Q4_0, {3, 32}, 54);
  check("q4_1", DType::Q4_1, {32}, 20);
  check("q8_0", DType::Q8_0, {1, 1, 1, 64}, 68);
  check("i8", DType::I8, {5}, 5);
  check("i16", DType::I16, {2}, 4);
  check("i32", DType::I32, {1}, 4);
  check("bf16", DType::BF16, {2, 2}, 8);
  check("q4_k", DType::Q4_K, {2, 256}, 288);  // k-quants: super-blocks of 256 (issue 11)
  check("q5_k", DType::Q5_K, {256}, 176);
  check("q6_k", DType::Q6_K, {512}, 420);
  float v;
  std::memcpy(&v, static_cast<const float*>(f->find("f32")->data) + 5, 4);
  EXPECT_EQ(v, 6.0f);
  EXPECT_EQ(static_cast<const uint8_t*>(f->find("q8_0")->data)[67], 0x11);
  // Unsupported types are listed (name -> ggml id) and hidden from find().
  EXPECT_EQ(f->unsupported_types().size(), 2u);
  EXPECT_EQ(f->unsupported_types().at("q2_k"), 10u);
  EXPECT_EQ(f->unsupported_types().at("iq2"), 16u);
  EXPECT_EQ(f->find("q2_k"), nullptr);
}

TEST(Gguf, Version2Accepted) {
  GgufBuilder b;
  b.version = 2;
  b.kv_str("general.architecture", "llama").tensor("w", {2}, 0, tb::f32_bytes({1, 2}));
  TempDir d;
  auto f = open_built(d, b.build());
  EXPECT_EQ(f->version(), 2u);
  ASSERT_NE(f->find("w"), nullptr);
}

// ---------------------------------------------------------------------------------------------
// Corrupt files

TEST(GgufCorrupt, BadMagic) {
  std::string bytes = GgufBuilder().build();
  bytes[0] = 'G';
  bytes[1] = 'G';
  bytes[2] = 'M';
  bytes[3] = 'L';
  const std::string e = built_error(bytes);
  EXPECT_THAT(e, HasSubstr("bad magic"));
  EXPECT_THAT(e, HasSubstr("'GGML' (47 47 4d 4c)"));
  EXPECT_THAT(built_error(std::string("\x00\x01\xff\x80", 4) + std::string(20, 0)),
              HasSubstr("got '....' (00 01 ff 80)"));
  EXPECT_THAT(built_error("GG"), HasSubstr("too short"));
}

TEST(GgufCorrupt, Versions) {
  GgufBuilder b;
  b.version = 1;
  EXPECT_THAT(built_error(b.build()), HasSubstr("GGUF version 1 is not supported"));
  b.version = 99;
  EXPECT_THAT(built_error(b.build()), HasSubstr("unsupported GGUF version 99"));
  b.version = 0x03000000;  // a big-endian v3 file read as little-endian
  EXPECT_THAT(built_error(b.build()), HasSubstr("big-endian"));
}

TEST(GgufCorrupt, AbsurdTensorCount) {
  GgufBuilder b;
  b.tensor_count_override = uint64_t(1) << 60;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THAT(built_error(b.build()), HasSubstr("tensor count 1152921504606846976 is implausible"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST(GgufCorrupt, AbsurdKvCount) {
  GgufBuilder b;
  b.kv_count_override = uint64_t(1) << 60;
  EXPECT_THAT(built_error(b.build()),
              HasSubstr("metadata count 1152921504606846976 is implausible"));
  b.kv_count_override = ~uint64_t(1);  // 2^64 - 2
  EXPECT_THAT(built_error(b.build()), HasSubstr("implausible"));
}

TEST(GgufCorrupt, AbsurdArrayLength) {
  GgufBuilder b;
  b.kv("a", tb::kARRAY, Bytes().u32(tb::kSTRING).u64(uint64_t(1) << 61));
  EXPECT_THAT(built_error(b.build()), HasSubstr("array 'a' claims 2305843009213693952 elements"));
  GgufBuilder c;
  c.kv("a", tb::kARRAY, Bytes().u32(99).u64(1));
  EXPECT_THAT(built_error(c.build()), HasSubstr("invalid element type 99"));
}

TEST(GgufCorrupt, TruncatedInMetadata) {
  GgufBuilder b;
  b.kv_str("general.architecture", "llama").kv_u32("llama.block_count", 5);
  const std::string full = b.build();
  // Cut inside the u32 value of the last key.
  const std::string e = built_error(full.substr(0, full.size() - 2));
  EXPECT_THAT(e, HasSubstr("truncated file"));
  EXPECT_THAT(e, HasSubstr("llama.block_count"));
  // Every possible cut point in the header gives an Error, never a crash.
  for (size_t n = 0; n < full.size(); ++n) {
    EXPECT_FALSE(built_error(full.substr(0, n)).empty()) << "cut at " << n;
  }
}

TEST(GgufCorrupt, TruncatedInTensorInfoAndData) {
  GgufBuilder b;
  b.kv_str("general.architecture", "llama")
      .tensor("a", {8}, 0, tb::f32_bytes({1, 2, 3, 4, 5, 6, 7, 8}))
      .tensor("b", {16}, 0, std::string(64, '\x01'));
  const std::string full = b.build();
  {
    TempDir d;
    EXPECT_EQ(open_built(d, full)->names().size(), 2u);
  }
  const std::string e = built_error(full.substr(0, full.size() - 10));
  EXPECT_THAT(e, HasSubstr("tensor 'b'"));
  EXPECT_THAT(e, HasSubstr("runs past the end of the file"));
  for (size_t n = 0; n < full.size(); n += 3) {
    EXPECT_FALSE(built_error(full.substr(0, n)).empty()) << "cut at " << n;
  }
}

TEST(GgufCorrupt, StringLengthPastEnd) {
  GgufBuilder b;
  b.kv("general.name", tb::kSTRING, Bytes().u64(1000).raw("abc"));
  EXPECT_THAT(built_error(b.build()), HasSubstr("string length 1000 of value of 'general.name'"));
  // A key whose length is huge.
  Bytes raw;
  raw.raw("GGUF").u32(3).u64(0).u64(1).u64(uint64_t(-1)).raw("xxxxxxxxxxxxxxxx");
  EXPECT_THAT(built_error(raw.bytes()), HasSubstr("runs past the end of the file"));
}

TEST(GgufCorrupt, TooManyDims) {
  GgufBuilder b;
  b.tensor("w5", {1, 1, 1, 1, 2}, 0, tb::f32_bytes({1, 2}));
  EXPECT_THAT(built_error(b.build()), HasSubstr("tensor 'w5' has n_dims 5"));
}

TEST(GgufCorrupt, ZeroDimensionDoesNotHideOverflow) {
  // Found by tests/fuzz/fuzz_gguf (corpus regress-numel-overflow): a zero dimension first made the
  // element count 0, so huge other dimensions passed and TensorView::numel() overflowed (UB).
  GgufBuilder b;
  b.tensor("z", {0, uint64_t(1) << 38, uint64_t(1) << 39}, 0, "");
  EXPECT_THAT(built_error(b.build()), HasSubstr("tensor 'z' has too many elements"));
  GgufBuilder ok;  // a zero dimension with small others is a valid empty tensor
  ok.tensor("e", {0, 4}, 0, "");
  TempDir d;
  write_bytes(d.file("e.gguf"), ok.build());
  auto f = gguf::File::open(d.file("e.gguf"));
  ASSERT_NE(f->find("e"), nullptr);
  EXPECT_EQ(f->find("e")->numel(), 0);
  EXPECT_EQ(f->find("e")->nbytes, 0u);
}

TEST(GgufCorrupt, MisalignedOffset) {
  GgufBuilder b;
  b.tensor("a", {2}, 0, tb::f32_bytes({1, 2}), /*offset_override=*/4);
  const std::string e = built_error(b.build());
  EXPECT_THAT(e, HasSubstr("tensor 'a' data offset 4 is not a multiple of the alignment 32"));
}

TEST(GgufCorrupt, OffsetPastEnd) {
  GgufBuilder b;
  b.tensor("a", {2}, 0, tb::f32_bytes({1, 2}), /*offset_override=*/uint64_t(1) << 40);
  EXPECT_THAT(built_error(b.build()), HasSubstr("runs past the end of the file"));
  GgufBuilder c;  // offset near 2^64: must not wrap around
  c.tensor("a", {2}, 0, tb::f32_bytes({1, 2}), /*offset_override=*/uint64_t(0) - 32);
  EXPECT_THAT(built_error(c.build()), HasSubstr("tensor 'a'"));
  GgufBuilder u;  // unsupported tensors are bounds-checked too
  u.tensor("k", {256}, 10, std::string(84, 0), /*offset_override=*/uint64_t(1) << 40);
  EXPECT_THAT(built_error(u.build()), HasSubstr("lies outside the file"));
}

TEST(GgufCorrupt, RowNotMultipleOfBlock) {
  GgufBuilder b;
  b.tensor("q", {48, 2}, 8, std::string(34 * 3, 0));
  EXPECT_THAT(
      built_error(b.build()),
      HasSubstr("tensor 'q' (Q8_0) row of 48 elements is not a multiple of the block size 32"));
}

TEST(GgufCorrupt, UnknownTypes) {
  GgufBuilder b;
  b.tensor("x", {4}, 77, std::string(16, 0));
  EXPECT_THAT(built_error(b.build()), HasSubstr("tensor 'x' has unknown ggml type 77"));
  GgufBuilder c;
  c.kv("k", 13, Bytes().u32(0));
  EXPECT_THAT(built_error(c.build()), HasSubstr("metadata 'k' has invalid value type 13"));
}

TEST(GgufCorrupt, Duplicates) {
  GgufBuilder b;
  b.kv_u32("a", 1).kv_u32("a", 2);
  EXPECT_THAT(built_error(b.build()), HasSubstr("duplicate metadata key 'a'"));
  GgufBuilder c;
  c.tensor("t", {1}, 0, tb::f32_bytes({1})).tensor("t", {1}, 0, tb::f32_bytes({2}));
  EXPECT_THAT(built_error(c.build()), HasSubstr("duplicate tensor name 't'"));
}

TEST(GgufCorrupt, BadAlignment) {
  GgufBuilder b;
  b.kv_u32("general.alignment", 24);
  EXPECT_THAT(built_error(b.build()),
              HasSubstr("general.alignment 24 is not a positive power of two"));
  GgufBuilder c;
  c.kv_str("general.alignment", "32");
  EXPECT_THAT(built_error(c.build()), HasSubstr("general.alignment must be an integer"));
}

TEST(GgufCorrupt, DeeplyNestedArrays) {
  // 100 levels of [[[...]]]: refused without recursing that deep.
  Bytes v;
  for (int i = 0; i < 100; ++i) v.u32(tb::kARRAY).u64(1);
  v.u32(tb::kU8).u64(0);
  GgufBuilder b;
  b.kv("deep", tb::kARRAY, v);
  EXPECT_THAT(built_error(b.build()), HasSubstr("nested deeper than"));
}

TEST(GgufCorrupt, RandomMutationsNeverCrash) {
  // Flip random bytes of a small valid file: every outcome is a clean open or a perfx::Error
  // (run under ASan/UBSan to catch out-of-bounds reads).
  GgufBuilder b;
  b.kv_str("general.architecture", "llama")
      .kv_str_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "hello"})
      .kv("tokenizer.ggml.scores", tb::kARRAY,
          Bytes().u32(tb::kF32).u64(2).put<float>(0.5f).put<float>(-1.f))
      .kv_u32("llama.block_count", 1)
      .tensor("a", {32, 2}, 8, std::string(68, '\x01'))
      .tensor("b", {4}, 0, tb::f32_bytes({1, 2, 3, 4}));
  const std::string good = b.build();
  TempDir d;
  const std::string p = d.file("m.gguf");
  uint32_t rng = 12345;
  auto next = [&] { return rng = rng * 1664525u + 1013904223u; };
  int opened = 0, rejected = 0;
  for (int it = 0; it < 300; ++it) {
    std::string m = good;
    const int flips = 1 + (int)(next() % 4);
    for (int k = 0; k < flips; ++k) {
      const size_t pos = next() % (m.size() - 4 * 34);  // mostly the header and tensor infos
      m[pos] = (char)(next() >> 24);
    }
    write_bytes(p, m);
    try {
      auto f = gguf::File::open(p);
      for (const auto& n : f->names()) {
        const TensorView* t = f->find(n);
        ASSERT_NE(t, nullptr);
        ASSERT_LE(static_cast<const uint8_t*>(t->data) + t->nbytes,
                  static_cast<const uint8_t*>(f->find(f->names()[0])->data) + m.size());
      }
      ++opened;
    } catch (const perfx::Error&) {
      ++rejected;
    }
  }
  EXPECT_EQ(opened + rejected, 300);
  EXPECT_GT(rejected, 30);
}
