// How far an elastic job has got, kept in the launcher's store across its rounds, so that a round
// that restarts from a checkpoint can say what the restart lost. Each round's rank 0 publishes
// where it starts and then its finished steps under a key of its round's own; the next round's
// rank 0 reads the last one the round before it published. The elastic agent (launch() with a c10d
// rendezvous) names the key (DDP_PROGRESS_KEY) and why the round began
// (DDP_ROUND_CAUSE); without it there is nothing to keep and from_environment() gives nullptr.
//
//   auto progress = ddp::JobProgress::from_environment(world);  // rank 0 only
//   if (progress && progress->previous()) {
//     // steps lost: progress->previous()->step - the step the checkpoint holds
//   }
//   if (progress) progress->publish(resumed_step);
//   for (each step) { ...; if (progress) progress->publish(global_step); }
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ddp/world.h"

namespace ddp {

/// One published step.
struct ProgressRecord {
  int64_t round = 0;   // the launcher's restart count when it was published
  int world_size = 0;  // of that round
  int64_t step = 0;    // global steps finished (the count a checkpoint holds)
  double time = 0;     // when, in seconds since the Unix epoch (that host's clock)
};

class JobProgress {
 public:
  /// Rank 0's, under an elastic agent: connects to the agent's store (its own connection, so a
  /// step never waits on the group's) and reads what the previous round published. nullptr on
  /// other ranks, without DDP_PROGRESS_KEY, or when the store cannot be used (said in one line
  /// on stderr: the progress is only reported, training goes on without it).
  static std::unique_ptr<JobProgress> from_environment(const WorldInfo& world);
  /// Under an elastic agent (DDP_PROGRESS_KEY set), on any rank: why the agent began this
  /// round (empty in the first); nullopt without one.
  static std::optional<std::string> round_cause(const WorldInfo& world);
  ~JobProgress();  // sends the newest step first (not when a signal ends the process)
  JobProgress(const JobProgress&) = delete;
  JobProgress& operator=(const JobProgress&) = delete;

  /// The last step the newest earlier round that got to start published (a round over before
  /// its rank 0 began publishes nothing): nullopt in the first round, or when none did.
  const std::optional<ProgressRecord>& previous() const { return previous_; }
  /// Why this round began, as the agent saw it (empty in the first round).
  const std::string& cause() const { return cause_; }
  /// `step` global steps are finished. Sent by a thread at most every 0.1 s, the newest only:
  /// the caller never waits for the store. A store call that fails is reported once, and the
  /// sending stops.
  void publish(int64_t step);

 private:
  struct Sender;
  JobProgress(std::unique_ptr<Sender> sender, std::optional<ProgressRecord> previous,
              std::string cause);
  std::unique_ptr<Sender> sender_;
  std::optional<ProgressRecord> previous_;
  std::string cause_;
};

}  // namespace ddp
