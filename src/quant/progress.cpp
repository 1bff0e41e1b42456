// Progress bar for `perfx quantize` (layer i/N, elapsed, ETA from the mean time per finished step).
#include "quant/progress.h"

#include <unistd.h>

#include <algorithm>

namespace perfx::quant {

ProgressBar::ProgressBar(std::string label, int total, std::FILE* out)
    : label_(std::move(label)),
      total_(std::max(1, total)),
      out_(out),
      tty_(out && isatty(fileno(out))),
      start_(std::chrono::steady_clock::now()) {}

std::string ProgressBar::format_seconds(double s) {
  if (!(s >= 0) || s > 1e7) return "?";
  const long t = static_cast<long>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

void ProgressBar::update(int done, const std::string& note) {
  if (!out_ || finished_) return;
  done = std::clamp(done, 0, total_);
  if (!tty_) {  // a line per tenth of the steps (and the last), not one per update
    const int tenth = done == total_ ? 10 : done * 10 / total_;
    if (tenth == last_tenth_) return;
    last_tenth_ = tenth;
  }
  const double el =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string eta = done > 0 ? format_seconds(el / done * (total_ - done)) : "?";
  constexpr int kWidth = 24;
  const int fill = done * kWidth / total_;
  std::string bar(static_cast<size_t>(fill), '#');
  bar.resize(kWidth, '.');
  std::fprintf(out_, "%s%s %d/%d [%s] elapsed %s ETA %s%s%s%s", tty_ ? "\r\033[K" : "",
               label_.c_str(), done, total_, bar.c_str(), format_seconds(el).c_str(), eta.c_str(),
               note.empty() ? "" : "  ", note.c_str(), tty_ ? "" : "\n");
  std::fflush(out_);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (out_ && tty_) {
    std::fputc('\n', out_);
    std::fflush(out_);
  }
}

}  // namespace perfx::quant
