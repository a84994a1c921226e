// --on-failure restart under an elastic agent: a round that begins after a membership change or
// a failure resumes from the newest checkpoint, and what the restart cost is the steps the
// previous round had finished beyond it. Rank 0 says so (it reads where the previous round got
// from the agent's store, job_progress.h): one line, one `membership_change` metrics record and
// one span of the trace, as regroup.h does for a change under --on-failure continue.
#pragma once

#include <chrono>

#include "ddp/elastic/job_progress.h"
#include "train/training.h"

namespace ddp::train {

/// Rank 0's report of this round's beginning, once the run resumed at `resumed_step` global
/// steps; `started`: when the run began in this process (the trace's span runs from there).
void report_new_round(Training& t, const JobProgress& progress, int64_t resumed_step,
                      std::chrono::steady_clock::time_point started);

}  // namespace ddp::train
