// UTF-8 repair, the GPT-2 byte alphabet and NFC/NFD against values computed with Python's
// unicodedata (Unicode 14).
#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include "tokenizer/unicode_norm.h"

namespace perfx::tok {
namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

TEST(TokUnicode, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE4\xBD\xA0"), "\xE4\xBD\xA0");
  EXPECT_EQ(utf8_lossy("\xE4\xBD"), kFFFD);  // truncated: one U+FFFD
  EXPECT_EQ(utf8_lossy("a\xE4\xBD"
                       "b"),
            "a" + kFFFD + "b");  // one per maximal subpart
  EXPECT_EQ(utf8_lossy("\xFF"), kFFFD);
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), kFFFD + kFFFD);              // overlong lead: each byte
  EXPECT_EQ(utf8_lossy("\xF0\x80"), kFFFD + kFFFD);              // F0 needs 90..BF next
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), kFFFD + kFFFD + kFFFD);  // surrogate
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), kFFFD + kFFFD + kFFFD + kFFFD);  // > U+10FFFF
  EXPECT_EQ(utf8_lossy("\xF0\x9F\xA6\x99"), "\xF0\x9F\xA6\x99");
  EXPECT_TRUE(utf8_is_valid("\xF0\x9F\xA6\x99 ok"));
  EXPECT_FALSE(utf8_is_valid("\xF0\x9F\xA6"));
}

TEST(TokUnicode, IncrementalLossyEqualsWhole) {
  const std::string s =
      "x\xF0\x9F\xA6\x99\xE4\xBD\xFF\xE4\xBD\xA0\xC3"
      "y\xED\xA0\x80z\xF0\x9F";
  const std::string whole = utf8_lossy(s);
  for (size_t cut = 0; cut <= s.size(); ++cut) {
    std::string out, pending = s.substr(0, cut);
    const size_t used = utf8_lossy_append(pending, false, out);
    pending.erase(0, used);
    pending += s.substr(cut);
    utf8_lossy_append(pending, true, out);
    EXPECT_EQ(out, whole) << "cut at " << cut;
  }
}

TEST(TokUnicode, ByteAlphabet) {
  EXPECT_EQ(byte_to_unicode(' '), "\xC4\xA0");   // Ġ U+0120
  EXPECT_EQ(byte_to_unicode('\n'), "\xC4\x8A");  // Ċ U+010A
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode(0xAD), "\xC5\x83");  // the 68th remapped byte: U+0143
  for (int b = 0; b < 256; ++b) {
    size_t pos = 0;
    uint32_t cp;
    ASSERT_TRUE(utf8_next(byte_to_unicode(static_cast<uint8_t>(b)), pos, cp));
    EXPECT_EQ(unicode_to_byte(cp), b);
  }
  EXPECT_EQ(unicode_to_byte(0x20), -1);
  EXPECT_EQ(unicode_to_byte(0x144), -1);
}

struct NormCase {
  const char* in;
  const char* nfc;
  const char* nfd;
};

TEST(TokUnicode, NfcNfdMatchPython) {
  const NormCase cases[] = {
      {"\x65\xCC\x81", "\xC3\xA9", "\x65\xCC\x81"},
      {"\xE1\xB8\x8A\xCC\xA3", "\xE1\xB8\x8C\xCC\x87", "\x44\xCC\xA3\xCC\x87"},  // reorder
      {"\x61\xCC\xA8\xCC\x81", "\xC4\x85\xCC\x81", "\x61\xCC\xA8\xCC\x81"},
      {"\xE2\x84\xAB", "\xC3\x85", "\x41\xCC\x8A"},                              // singleton Å
      {"\xE0\xA5\x98", "\xE0\xA4\x95\xE0\xA4\xBC", "\xE0\xA4\x95\xE0\xA4\xBC"},  // exclusion
      {"\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8", "\xEA\xB0\x81",
       "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"},  // Hangul L V T
      {"\xEA\xB0\x80\xE1\x86\xA8", "\xEA\xB0\x81", "\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"},
      {"\x6F\xCC\x88\xCC\x84", "\xC8\xAB", "\x6F\xCC\x88\xCC\x84"},  // two-step compose
      {"\xC3\x85\xCC\x81\x78", "\xC7\xBA\x78", "\x41\xCC\x8A\xCC\x81\x78"},
      {"\x71\xCC\x87\xCC\xA3", "\x71\xCC\xA3\xCC\x87", "\x71\xCC\xA3\xCC\x87"},
      {"\x41\xCC\xA7\xCC\x8A", "\xC3\x85\xCC\xA7", "\x41\xCC\xA7\xCC\x8A"},  // not blocked
      {"\xE1\xBA\x9B\xCC\xA3", "\xE1\xBA\x9B\xCC\xA3", "\xC5\xBF\xCC\xA3\xCC\x87"},
      {"\xCD\x84", "\xCC\x88\xCC\x81", "\xCC\x88\xCC\x81"},  // non-starter decomp
      {"\xE0\xBD\xB3", "\xE0\xBD\xB1\xE0\xBD\xB2", "\xE0\xBD\xB1\xE0\xBD\xB2"},
      {"\xEF\xA4\x80", "\xE8\xB1\x88", "\xE8\xB1\x88"},  // CJK compatibility
      {"plain ASCII", "plain ASCII", "plain ASCII"},
      {"\xE4\xBD\xA0\xE5\xA5\xBD", "\xE4\xBD\xA0\xE5\xA5\xBD", "\xE4\xBD\xA0\xE5\xA5\xBD"},
  };
  for (const NormCase& c : cases) {
    EXPECT_EQ(to_nfc(c.in), c.nfc) << c.in;
    EXPECT_EQ(to_nfd(c.in), c.nfd) << c.in;
  }
}

TEST(TokUnicode, Lowercase) {
  EXPECT_EQ(to_lower("HeLLo \xC3\x84PFEL \xD0\x9C\xD0\x98\xD0\xA0 \xCE\xA3"),
            "hello \xC3\xA4pfel \xD0\xBC\xD0\xB8\xD1\x80 \xCF\x83");
}

}  // namespace
}  // namespace perfx::tok
