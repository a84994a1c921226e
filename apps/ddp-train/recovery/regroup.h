// --on-failure continue in ddp-train: what the training loop does when its fault-tolerant group
// changes (fault_tolerance.h). The survivors of a lost rank go on from the weights they hold in
// a smaller group, the rest of the epoch shared out over it; a newcomer takes the state from
// rank 0 and trains from the next step. Each change is one line on stdout (rank 0), a metrics
// record and a span of the trace.
#pragma once

#include <chrono>
#include <functional>

#include "train/training.h"

namespace ddp::train {

/// After a verdict that asks for it, at a step boundary of epoch `epoch`, `steps_here` steps
/// into this world's share of it (`discarded`: the step begun at `step_start` and just voted on
/// was thrown away): the next generation, the model wrapped again over its group, the
/// newcomers given the state, and the rest of the epoch re-sharded.
void regroup(Training& t, int epoch, int64_t steps_here, bool discarded,
             std::chrono::steady_clock::time_point step_start);

/// A newcomer's first generation: takes the state from rank 0 and wraps the model; returns
/// where the run stands.
Position settle_newcomer(Training& t);

/// Runs `phase` (the collectives at an epoch's end) until it completes on every rank of one
/// generation, regrouping when it fails on any; without fault tolerance, just runs it.
void run_phase(Training& t, int epoch, const std::function<void()>& phase);

}  // namespace ddp::train
