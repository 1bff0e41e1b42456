// A progress bar on stderr: "label i/N [####....] elapsed m:ss ETA m:ss".
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace perfx::quant {

class ProgressBar {
 public:
  /// `total` steps; the bar is redrawn in place when `out` is a terminal, else (a pipe, a log
  /// file) written as a line only when a tenth more of the steps is done, and at the end.
  ProgressBar(std::string label, int total, std::FILE* out = stderr);
  /// Marks `done` steps complete (0..total) with an optional note ("searching scales").
  void update(int done, const std::string& note = "");
  /// Ends the bar with a newline (idempotent).
  void finish();
  ~ProgressBar() { finish(); }
  /// "m:ss" or "h:mm:ss".
  static std::string format_seconds(double s);

 private:
  std::string label_;
  int total_;
  std::FILE* out_;
  bool tty_;
  bool finished_ = false;
  int last_tenth_ = -1;  // not a terminal: the tenths of `total` already written
  std::chrono::steady_clock::time_point start_;
};

}  // namespace perfx::quant
