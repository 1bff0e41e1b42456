// Calibration blocks (FORMATS.md §1.2; AutoAWQ get_calib_dataset: strip, encode, skip samples
// longer than max_seq_len, concatenate n_samples samples, split into blocks of max_seq_len).
#include "quant/calib.h"

#include <string_view>

#include "perfx/status.h"
#include "perfx/tokenizer.h"

namespace perfx::quant {

CalibBlocks make_calib_blocks(const std::string& text, const Tokenizer& tok, int n_samples,
                              int seq_len) {
  check(n_samples >= 1, "--n-samples must be >= 1, got " + std::to_string(n_samples));
  check(seq_len >= 1, "--seq-len must be >= 1, got " + std::to_string(seq_len));
  CalibBlocks cb;
  cb.seq_len = seq_len;
  std::vector<int32_t> all;
  size_t pos = 0;
  while (pos < text.size() && cb.n_samples < n_samples) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    const auto ws = [](char c) {
      return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
    };
    while (!line.empty() && ws(line.front())) line.remove_prefix(1);
    while (!line.empty() && ws(line.back())) line.remove_suffix(1);
    if (line.empty()) continue;
    const std::vector<int32_t> ids = tok.encode(line, tok.add_bos_by_default());
    if (ids.empty()) continue;
    if (static_cast<int>(ids.size()) > seq_len) {
      ++cb.n_skipped_long;
      continue;
    }
    all.insert(all.end(), ids.begin(), ids.end());
    ++cb.n_samples;
  }
  cb.n_blocks = static_cast<int>(all.size() / static_cast<size_t>(seq_len));
  check(cb.n_blocks >= 1, "calibration text gives " + std::to_string(all.size()) + " tokens from " +
                              std::to_string(cb.n_samples) + " samples, fewer than one block of " +
                              std::to_string(seq_len) +
                              " tokens (use more text, more --n-samples or a smaller --seq-len)");
  cb.n_dropped = static_cast<int64_t>(all.size()) - static_cast<int64_t>(cb.n_blocks) * seq_len;
  all.resize(static_cast<size_t>(cb.n_blocks) * seq_len);
  cb.tokens = std::move(all);
  return cb;
}

}  // namespace perfx::quant
