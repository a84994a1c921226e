#include "new_round.h"

#include <algorithm>
#include <cstdio>

#include "ddp/error.h"

namespace ddp::train {

void report_new_round(Training& t, const JobProgress& progress, int64_t resumed_step,
                      std::chrono::steady_clock::time_point started) {
  const WorldInfo& world = t.setup.world;
  const std::optional<ProgressRecord>& last = progress.previous();
  // A round that ended before its first step published nothing, and lost nothing.
  const int64_t reached = last ? last->step : resumed_step;
  const int64_t lost = std::max<int64_t>(0, reached - resumed_step);
  const int old_world = last ? last->world_size : 0;
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
          .count();  // Unix seconds
  const std::string cause = progress.cause().empty() ? "a restart" : progress.cause();
  char after[64] = "";  // how long after the last round's last step this one is ready
  if (last)
    std::snprintf(after, sizeof after, ", %.1f s after it", std::max(0.0, now - last->time));
  std::printf(
      "membership change: round %d, world size %d%s, because %s; the last round reached step "
      "%lld and this one resumes at step %lld: %lld step(s) lost%s\n",
      world.restart_count + 1, world.world_size,
      old_world > 0 ? concat(" (was ", old_world, ")").c_str() : "", cause.c_str(),
      (long long)reached, (long long)resumed_step, (long long)lost, after);
  std::fflush(stdout);
  JsonRecord record;
  record.add("event", "membership_change")
      .add("time", int64_t(now))  // Unix seconds
      .add("round", world.restart_count + 1)
      .add("old_world", old_world)
      .add("new_world", world.world_size)
      .add("cause", cause)
      .add("reached_step", reached)
      .add("resumed_step", resumed_step)
      .add("steps_lost", lost);
  t.reporter.membership_change(record);
  t.timeline.span(concat("round ", world.restart_count + 1, ": world size ", world.world_size, ", ",
                         lost, " step(s) lost"),
                  started, std::chrono::steady_clock::now());
}

}  // namespace ddp::train
