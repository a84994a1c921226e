#include "recovery/new_round.h"

#include <algorithm>
#include <cstdio>

#include <c10/util/StringUtil.h>

#include "ddp/debug/flight_recorder.h"  // unix_microseconds
#include "ddp/error.h"

namespace ddp::train {

void report_new_round(Training& t, const JobProgress& progress, int64_t resumed_step,
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
  t.reporter.membership_change(record);
  t.chrome_trace.span(c10::str("round ", world.restart_count + 1, ": world size ", world.world_size,
                               ", ", lost, " step(s) lost"),
                      started, std::chrono::steady_clock::now());
}

}  // namespace ddp::train
