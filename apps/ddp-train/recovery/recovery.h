// How a run of ddp-train survives a membership change: a rank lost, or a node added. Two
// policies of one concept, chosen by --on-failure; in both, a change begins a new generation of
// the job's workers, which rank 0 reports as one line, one `membership_change` metrics record
// and one span of the trace:
//   restart (restart.cpp): the change ends the launcher's round; its next round is the next
//     generation, new processes that resume from the newest checkpoint. Rank 0 keeps the job's
//     progress in the agent's store (job_progress.h), so that it can say what the change lost.
//   continue (continue.cpp): the ranks vote on every step (fault_tolerance.h); after a change
//     the survivors go on from the weights they hold in the next generation of the group, a
//     newcomer takes the state from rank 0, and the rest of the epoch is shared out over it.
// The training loop calls this interface for all that a change does; it never asks which policy
// runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "ddp/fault_tolerance/fault_tolerance.h"
#include "train/training.h"

namespace ddp::train {

class Recovery {
 public:
  using Clock = std::chrono::steady_clock;

  /// The policy this run's set-up asks for (a fault-tolerant group: continue; else restart).
  /// `started`: when the run began in this process (a change's span runs from there).
  static std::unique_ptr<Recovery> for_run(Training& t, Clock::time_point started);
  virtual ~Recovery() = default;

  /// Where the run starts, given where the checkpoint put it: a newcomer's is the state a peer
  /// sends; a restarted generation's is reported with what the change lost.
  virtual Position begin(const Position& restored) = 0;
  /// Whether a step a lost peer broke (PeerFailure) is voted on rather than ending the run.
  virtual bool survives_peer_failure() const = 0;
  /// Every rank's verdict on the step this rank's forward and backward did (`ok`: without a
  /// PeerFailure): whether it counts, and whether a new generation begins before the next one.
  virtual StepVerdict vote(bool ok) = 0;
  /// t.global_step steps are done: what a change would lose after this.
  virtual void step_done() = 0;
  /// After a verdict that asks for it, at a step boundary of epoch `epoch`, `steps_here` steps
  /// into this generation's share of it (`discarded`: the step begun at `step_start` and just
  /// voted on was thrown away): the next generation, and the rest of the epoch shared out.
  virtual void next_generation(int epoch, int64_t steps_here, bool discarded,
                               Clock::time_point step_start) = 0;
  /// Runs `phase` (the collectives at an epoch's end) until it completes on every rank of one
  /// generation.
  virtual void run_phase(int epoch, const std::function<void()>& phase) = 0;
  /// The run is over on this rank.
  virtual void finish() = 0;
};

/// --on-failure restart (restart.cpp).
std::unique_ptr<Recovery> restart_recovery(Training& t, Recovery::Clock::time_point started);
/// --on-failure continue (continue.cpp).
std::unique_ptr<Recovery> continue_recovery(Training& t);

inline std::unique_ptr<Recovery> Recovery::for_run(Training& t, Clock::time_point started) {
  TORCH_CHECK(t.model && t.optimizer && t.sampler && t.loader && t.trace && t.chrome_trace &&
                  t.reporter && t.step_checkpoints,
              "Recovery::for_run: every part of the Training must be given first");
  return t.setup.ft ? continue_recovery(t) : restart_recovery(t, started);
}

}  // namespace ddp::train
