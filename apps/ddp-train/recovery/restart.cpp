#include "recovery/recovery.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>

#include <c10/util/StringUtil.h>

#include "ddp/debug/flight_recorder.h"  // unix_microseconds
#include "ddp/elastic/job_progress.h"
#include "ddp/error.h"
#include "metrics.h"

namespace ddp::train {
namespace {

// Rank 0's report of this generation's beginning, once the run resumed at `resumed_step` global
// steps; `started`: when the run began in this process (the trace's span runs from there).
void report_restart(Training& t, const JobProgress& progress, int64_t resumed_step,
                    std::chrono::steady_clock::time_point started) {
  const WorldInfo& world = t.setup.world;
  const std::optional<ProgressRecord>& last = progress.previous();
  // A rank 0 ended by a signal may not have sent its last steps: reached is at least what a
  // checkpoint of that round holds.
  const int64_t reached = last ? std::max(last->step, resumed_step) : resumed_step;
  const int64_t lost = reached - resumed_step;
  const int old_world = last ? last->world_size : 0;
  const double now = double(unix_microseconds()) * 1e-6;  // Unix seconds
  const std::string because = progress.cause().empty() ? "" : ", because " + progress.cause();
  char what[200];
  if (last) {
    // Between two hosts' clocks, when rank 0 moved: a rough figure.
    std::snprintf(what, sizeof what,
                  "round %lld (world size %d) reached step %lld and this one resumes at step "
                  "%lld: %lld step(s) lost, ready %.1f s after that step",
                  (long long)last->round + 1, old_world, (long long)reached,
                  (long long)resumed_step, (long long)lost, std::max(0.0, now - last->time));
  } else {
    std::snprintf(what, sizeof what,
                  "no earlier round reached its first step; this one resumes at step %lld",
                  (long long)resumed_step);
  }
  std::printf("membership change: round %d, world size %d%s; %s\n", world.restart_count + 1,
              world.world_size, because.c_str(), what);
  std::fflush(stdout);
  JsonRecord record;
  record.add("event", "membership_change")
      .add("time", int64_t(now))  // Unix seconds
      .add("round", world.restart_count + 1)
      .add("old_world", old_world)
      .add("new_world", world.world_size)
      .add("cause", progress.cause())
      .add("reached_step", reached)
      .add("resumed_step", resumed_step)
      .add("steps_lost", lost);
  t.reporter->membership_change(record);
  t.chrome_trace->span(c10::str("round ", world.restart_count + 1, ": world size ",
                                world.world_size, ", ", lost, " step(s) lost"),
                       started, std::chrono::steady_clock::now());
}

// --on-failure restart: nothing to do within a generation but keep the progress (rank 0, under
// an elastic agent); a lost peer ends it, and the launcher starts the next.
class RestartRecovery : public Recovery {
 public:
  RestartRecovery(Training& t, Clock::time_point started)
      : t_(t), started_(started), progress_(JobProgress::from_environment(t.setup.world)) {}

  Position begin(const Position& restored) override {
    if (progress_ && t_.setup.world.restart_count > 0) {
      report_restart(t_, *progress_, restored.global_step, started_);
    }
    if (progress_) progress_->publish(restored.global_step);  // it started, if nothing more
    return restored;
  }
  bool survives_peer_failure() const override { return false; }
  StepVerdict vote(bool ok) override { return {ok, false}; }
  void step_done() override {
    if (progress_) progress_->publish(t_.global_step);
  }
  void next_generation(int, int64_t, bool, Clock::time_point) override {
    throw std::logic_error("--on-failure restart: a new generation is the launcher's next round");
  }
  void run_phase(int, const std::function<void()>& phase) override { phase(); }
  void finish() override {}

 private:
  Training& t_;
  const Clock::time_point started_;
  const std::unique_ptr<JobProgress> progress_;  // rank 0's under an elastic agent, else null
};

}  // namespace

std::unique_ptr<Recovery> restart_recovery(Training& t, Recovery::Clock::time_point started) {
  return std::make_unique<RestartRecovery>(t, started);
}

}  // namespace ddp::train
