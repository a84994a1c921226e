// Rank 0's view of an epoch in progress. On a terminal: one line redrawn in place, with the
// share of the epoch done, the loss, images/s and the time left. Elsewhere (a file, a pipe, CI)
// nothing: the periodic "epoch E step S/N loss L" lines (--log-every) are the plain form.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

namespace ddp::train {

class ProgressBar {
 public:
  /// Whether stdout ends up on a terminal: it is one, or a launcher that prints to one relays it
  /// (ddprun and ddp-train --nproc-per-node tell their workers: launcher_stdout_is_terminal()).
  static bool stdout_is_terminal();

  /// `live`: draw at all; `steps`: the epoch's steps on this rank.
  ProgressBar(bool live, int epoch, int epochs, int64_t steps);
  ~ProgressBar() { finish(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  bool live() const { return live_; }
  /// After `step` (1-based) steps and `images` images over all ranks. `loss` is called only when
  /// the line is redrawn (at most 4 times a second), so reading it costs nothing per step.
  void update(int64_t step, int64_t images, const std::function<double()>& loss);
  /// Clears the line, so the epoch's summary is printed in its place.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  bool live_;
  bool shown_ = false;
  int epoch_, epochs_;
  int64_t steps_;
  Clock::time_point start_, last_draw_;
};

}  // namespace ddp::train
