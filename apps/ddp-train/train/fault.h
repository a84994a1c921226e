// Fault injection for the reliability tests, outside the training step's logic: the step hands
// each loss to Fault::at_loss, which does nothing unless DDP_FAULT names this step and rank.
//   DDP_FAULT=KIND@STEP[:RANK]   KIND: nan (this rank's loss becomes NaN), throw (an error),
//                                hang (stops calling collectives), exit (exits with code 3);
//                                at global step STEP (1-based) on rank RANK (default 0).
//   DDP_FAULT=slow@STEP:RANK:MS  rank RANK sleeps MS milliseconds in every step from STEP on
//                                (a straggler).
//   DDP_FAULT=freeze@STEP:RANK:MS  rank RANK's process stops (SIGSTOP, all its threads) for MS
//                                milliseconds at step STEP (a frozen node).
#pragma once

#include <cstdint>
#include <string>

#include <torch/torch.h>

namespace ddp::train {

class Fault {
 public:
  /// The fault DDP_FAULT asks for (none when it is unset or empty); throws InvalidArgument
  /// naming the variable when it cannot be read.
  static Fault from_environment();

  /// Called with global step `global_step`'s (1-based) loss on `rank`: injects the fault when it
  /// is due there.
  void at_loss(int64_t global_step, int rank, torch::Tensor& loss) const;

 private:
  std::string kind_;  // empty: no fault
  int64_t step_ = -1;
  int rank_ = 0;
  int slow_ms_ = 0;  // slow: the delay of each step; freeze: how long it stops
};

}  // namespace ddp::train
