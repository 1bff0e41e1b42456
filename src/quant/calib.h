// AWQ calibration data from a text file (FORMATS.md §1.2, AutoAWQ awq/utils/calib_data.py).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace perfx {
class Tokenizer;
}

namespace perfx::quant {

/// Calibration token blocks: `n_blocks` independent sequences of `seq_len` tokens each,
/// concatenated in `tokens` [n_blocks * seq_len].
struct CalibBlocks {
  int n_blocks = 0, seq_len = 0;
  std::vector<int32_t> tokens;
  int n_samples = 0;       // samples accepted
  int n_skipped_long = 0;  // samples skipped for having more than seq_len tokens
  int64_t n_dropped = 0;   // tokens dropped at the end (remainder of the last block)
};

/// Builds the calibration blocks as AutoAWQ does for a list of texts: every non-empty line of
/// `text` (after stripping surrounding whitespace) is one sample, in file order (no shuffle),
/// encoded with the tokenizer's default BOS handling; samples longer than seq_len tokens are
/// skipped; the first n_samples accepted samples are concatenated and cut into blocks of seq_len
/// tokens, dropping the remainder. Empty lines are skipped (AutoAWQ would keep a lone BOS).
/// Throws perfx::Error when n_samples < 1, seq_len < 1, or fewer than seq_len tokens result
/// (naming how many there are).
CalibBlocks make_calib_blocks(const std::string& text, const Tokenizer& tok, int n_samples,
                              int seq_len);

}  // namespace perfx::quant
