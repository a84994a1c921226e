// --step-trace: every rank writes the times of each of its training steps, to find what makes a
// synchronised step slow (a straggling rank, a late batch, the wait for the all-reduce). The
// times are seconds on the monotonic clock, which all processes of one machine share, so the
// ranks' lines for one step can be set side by side (tools/step_trace.py does).
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "created_file_guard.h"

namespace ddp::train {

class StepTrace {
 public:
  using Clock = std::chrono::steady_clock;

  /// One training step on this rank, in the order things happen.
  struct Step {
    int epoch = 0;
    int64_t global_step = 0;
    Clock::time_point start;          // before asking the loader for the batch
    Clock::time_point batch_ready;    // the batch is in hand (on the device)
    Clock::time_point forward_done;   // loss computed
    Clock::time_point backward_done;  // this rank's gradients computed, before waiting on others
    Clock::time_point averaged;       // gradients averaged over the ranks (the wait is over)
    Clock::time_point done;           // optimizer step taken
  };

  /// Writes to PREFIX.RANK.csv, replacing what it held from the first step on (a start-up that
  /// fails leaves an earlier trace as it was, and no file where there was none); an empty prefix
  /// traces nothing. Throws IoError when the file cannot be opened.
  StepTrace(const std::string& prefix, int rank);
  ~StepTrace();
  StepTrace(const StepTrace&) = delete;
  StepTrace& operator=(const StepTrace&) = delete;

  bool enabled() const { return file_ != nullptr; }
  /// One CSV line, flushed (a crashed or hung job keeps its trace up to the last step).
  void write(const Step& step);

 private:
  void start();                            // empties the file and writes the header
  [[noreturn]] void write_failed() const;  // throws IoError naming the file
  std::optional<CreatedFileGuard> created_;
  std::FILE* file_ = nullptr;  // opened for appending, emptied at the first step
  bool started_ = false;       // the header is written
  std::string path_;
  double last_cpu_seconds_ = 0;  // this thread's CPU time when the previous line was written
};

}  // namespace ddp::train
