// --trace FILE: a timeline of the whole job in the Chrome trace format (JSON "traceEvents"),
// which Perfetto (ui.perfetto.dev) and chrome://tracing open. Every rank is a process; its
// training thread is one track (each step, and inside it data wait, forward, backward, the wait
// for the all-reduce, optimizer; evaluation and checkpoints), and each gradient bucket's
// all-reduce is a track of its own, from launch to completion, so the overlap with backward is
// plain to see. Every rank keeps its events in memory; at the end rank 0 gathers and writes them.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/debug/flight_recorder.h"
#include "ddp/process_group.h"

namespace ddp::train {

class ChromeTrace {
 public:
  using Clock = std::chrono::steady_clock;

  /// `path` empty: records nothing. Rank 0 checks at once that the file's directory is
  /// writable (throws IoError naming --trace).
  ChromeTrace(const std::string& path, int rank);
  ChromeTrace(const ChromeTrace&) = delete;
  ChromeTrace& operator=(const ChromeTrace&) = delete;

  bool enabled() const { return !path_.empty(); }

  /// Draws every collective `recorder` sees complete: a bucket's on that bucket's track, the
  /// others on a track of their own.
  void watch(FlightRecorder& recorder);
  /// A span on the training track (`step` >= 0 is shown with it).
  void span(const std::string& name, Clock::time_point begin, Clock::time_point end,
            int64_t step = -1);

  /// Gathers every rank's events to rank 0, which writes the file (a collective when `group`).
  void write(ProcessGroup* group) const;

 private:
  struct Event {
    std::string name;
    int track;  // 0: training; 1: other collectives; 2 + b: bucket b's all-reduces
    int64_t begin_us, end_us;
    int64_t step;
  };
  void add(Event event);
  /// This rank's events as JSON objects, comma-separated.
  std::string events_json() const;

  std::string path_;
  int rank_;
  int64_t offset_us_;         // Unix microseconds minus steady-clock microseconds: one time axis
  mutable std::mutex mutex_;  // collectives complete on the backend's threads
  std::vector<Event> events_;
  int max_track_ = 1;
};

}  // namespace ddp::train
