// The quantizer's progress bar (quant/progress.h) written to a file, as when stderr is a pipe or a
// log: a line per tenth of the steps and the last one, not a line per update (a fresh-user trial
// saw ~35 lines for a 15-layer model, two updates per layer with notes).
#include "quant/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace perfx::quant {
namespace {

std::vector<std::string> lines_of(std::FILE* f) {
  std::rewind(f);
  std::vector<std::string> lines;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) lines.emplace_back(buf);
  return lines;
}

TEST(ProgressBar, AFileGetsALinePerTenthAndTheLast) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("layer", 37, f);
    for (int i = 0; i <= 37; ++i) {
      bar.update(i, "searching scales");
      bar.update(i, "clipping");
    }
  }
  const auto lines = lines_of(f);
  std::fclose(f);
  ASSERT_EQ(lines.size(), 11u);  // 0/37 (tenth 0) ... tenth 9, then 37/37
  EXPECT_EQ(lines.front().rfind("layer 0/37 [", 0), 0u) << lines.front();
  EXPECT_EQ(lines.back().rfind("layer 37/37 [########################]", 0), 0u) << lines.back();
}

TEST(ProgressBar, FewStepsGetALineEach) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("layer", 2, f);
    for (int i = 0; i <= 2; ++i) bar.update(i);
  }
  const auto lines = lines_of(f);
  std::fclose(f);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1].rfind("layer 1/2 [############............]", 0), 0u) << lines[1];
}

}  // namespace
}  // namespace perfx::quant
