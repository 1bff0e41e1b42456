// Helpers for the tokenizer tests: cached tokenizers and llama.cpp-style vector files.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "perfx/tokenizer.h"
#include "support/test_support.h"

namespace perfx::test {

/// Loads (once per process) the tokenizer in shared/<rel_dir> with from_hf_dir.
const Tokenizer& hf_tokenizer(const std::string& rel_dir);

/// One test string and the ids the reference gives for it.
struct Vector {
  std::string text;
  std::vector<int32_t> ids;
};

/// Reads an .inp (strings separated by "\n__ggml_vocab_test__\n") and its .out (one line of ids
/// per string); fails the test when the counts do not match.
std::vector<Vector> read_vectors(const std::string& inp_rel, const std::string& out_rel);

/// Formats ids for failure messages.
std::string ids_str(const std::vector<int32_t>& ids);

/// True when `s` is well-formed UTF-8.
bool valid_utf8(const std::string& s);

}  // namespace perfx::test
