// Stragglers: in a synchronised step every rank waits for the slowest one, so one slow rank
// (a busy core, a slow GPU, a noisy neighbour) sets the pace of the job. Each rank notes the
// compute time of its steps (all of the step but the wait for data and for the all-reduce);
// at the end of an epoch the ranks compare them, and the report names the rank the others
// waited for most, with each rank's compute against the fastest rank and against its own median.
#pragma once

#include <string>
#include <vector>

#include "ddp/process_group.h"
#include "metrics.h"

namespace ddp::train {

/// One epoch's comparison, the same on every rank.
struct StragglerReport {
  std::vector<double> compute_ms;  // each rank's mean compute per step
  std::vector<double> vs_fastest;  // its mean / the fastest rank's mean
  std::vector<double> vs_median;   // its mean / its own median: above 1, a few slow steps
  int waited_for = -1;             // the rank the others waited for most (-1: one rank)
  double waited_seconds = 0;       // how long the others waited for it, in all
  int64_t steps = 0;               // steps that every rank took

  /// "stragglers: rank 1 kept the others waiting 2.61 s (52.3 ms a step); compute per step:
  /// rank 0 10.2 ms (1.00x the fastest, 1.01x its median), rank 1 ..."
  std::string line() const;
  /// The metrics record's fields.
  void add_to(JsonRecord& record) const;
};

class StragglerWatch {
 public:
  /// This rank's compute time in one step.
  void step(double compute_seconds) { compute_.push_back(compute_seconds); }
  /// Compares the epoch's steps across the ranks (a collective; without a group, this rank
  /// alone) and starts the next epoch.
  StragglerReport end_epoch(ProcessGroup* group);

 private:
  std::vector<double> compute_;
};

/// The comparison of the ranks' per-step compute seconds (`compute[rank][step]`; ranks with
/// fewer steps, having joined early, count only in the steps they took).
StragglerReport compare_ranks(const std::vector<std::vector<double>>& compute);

}  // namespace ddp::train
