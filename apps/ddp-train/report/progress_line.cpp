#include "report/progress_line.h"

#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

#include "ddp/elastic/launch.h"

namespace ddp::train {
namespace {

// "1:05:09", "4:07": hours only when needed.
std::string duration_text(double seconds) {
  const long s = seconds > 0 ? long(seconds + 0.5) : 0;
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  } else {
    std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  }
  return text;
}

}  // namespace

bool ProgressBar::stdout_is_terminal() {
  if (const std::optional<bool> relayed = launcher_stdout_is_terminal()) return *relayed;
  return ::isatty(STDOUT_FILENO) == 1;
}

ProgressBar::ProgressBar(bool live, int epoch, int epochs, int64_t steps)
    : live_(live && steps > 0),
      epoch_(epoch),
      epochs_(epochs),
      steps_(steps),
      start_(Clock::now()),
      last_draw_(start_) {}

void ProgressBar::update(int64_t step, int64_t images, const std::function<double()>& loss) {
  if (!live_) return;
  const auto now = Clock::now();
  if (step < steps_ && now - last_draw_ < std::chrono::milliseconds(250)) return;
  last_draw_ = now;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double done = double(step) / double(steps_);
  constexpr int kWidth = 24;
  std::string bar(size_t(kWidth), '-');
  for (int i = 0; i < int(done * kWidth); ++i) bar[size_t(i)] = '#';
  const double left = step > 0 ? elapsed / double(step) * double(steps_ - step) : 0;
  // Text, then "clear to the end of the line", then back to its start for the next redraw.
  std::printf("epoch %d/%d [%s] %3.0f%% %lld/%lld  loss %.4f  %.0f img/s  ETA %s\033[K\r", epoch_,
              epochs_, bar.c_str(), 100 * done, (long long)step, (long long)steps_, loss(),
              elapsed > 0 ? double(images) / elapsed : 0.0, duration_text(left).c_str());
  std::fflush(stdout);
  shown_ = true;
}

void ProgressBar::finish() {
  if (!shown_) return;
  std::printf("\033[K");  // the cursor is at the line's start
  std::fflush(stdout);
  shown_ = false;
}

}  // namespace ddp::train
