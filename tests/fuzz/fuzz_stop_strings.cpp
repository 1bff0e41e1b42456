// Fuzz target: the stop-string matcher that filters streamed (SSE) text (StopMatcher,
// src/runtime/stop_strings.*). Input: 1 byte k, then segments separated by 0xFF bytes: the first
// k % 4 + 1 segments are the stop strings, the rest the text chunks pushed one by one.
// Invariants (all exact): the emitted text (every push() plus flush()) is a prefix of the
// concatenated chunks and never contains a stop string; when stopped(), the text right after
// the emitted prefix starts with a stop string; when not stopped, everything was emitted and the
// whole text contains no stop string; nothing is emitted after stopping.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "runtime/stop_strings.h"

using namespace perfx;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t n_stops = data[0] % 4 + 1;
  std::vector<std::string> segs(1);
  for (size_t i = 1; i < size; ++i) {
    if (data[i] == 0xFF)
      segs.emplace_back();
    else
      segs.back() += (char)data[i];
  }
  std::vector<std::string> stops, chunks;
  for (size_t i = 0; i < segs.size(); ++i) (i < n_stops ? stops : chunks).push_back(segs[i]);
  std::vector<std::string> nonempty;
  for (const auto& s : stops)
    if (!s.empty()) nonempty.push_back(s);

  StopMatcher m(stops);
  std::string full, emitted;
  for (const auto& c : chunks) {
    const bool was_stopped = m.stopped();
    full += c;
    const std::string out = m.push(c);
    if (was_stopped) FUZZ_ASSERT(out.empty(), "text emitted after the stop");
    emitted += out;
    FUZZ_ASSERT(full.compare(0, emitted.size(), emitted) == 0 && emitted.size() <= full.size(),
                "emitted text is not a prefix of the input");
  }
  emitted += m.flush();
  FUZZ_ASSERT(emitted.size() <= full.size() && full.compare(0, emitted.size(), emitted) == 0,
              "emitted text is not a prefix of the input");
  for (const auto& s : nonempty)
    FUZZ_ASSERT(emitted.find(s) == std::string::npos, "emitted text contains a stop string");
  if (m.stopped()) {
    bool starts = false;
    for (const auto& s : nonempty) starts |= full.compare(emitted.size(), s.size(), s) == 0;
    FUZZ_ASSERT(starts, "stopped, but no stop string follows the emitted text");
  } else {
    FUZZ_ASSERT(emitted == full, "not stopped, but text was lost");
    for (const auto& s : nonempty)
      FUZZ_ASSERT(full.find(s) == std::string::npos, "a stop string in the text was missed");
  }
  return 0;
}
