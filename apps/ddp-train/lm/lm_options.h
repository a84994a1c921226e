// ddp-train's flags for the GPTs (--model gpt-*, --dataset tokens), which nanoGPT's train.py has
// and the image classifiers do not, and the checks of what a GPT run can be combined with.
#pragma once

#include <vector>

#include "flags.h"
#include "options.h"

namespace ddp::train {

/// --parallel, --steps, --grad-accum, --block-size, --grad-clip, --min-lr, --warmup-steps,
/// --beta2, --eval-every, --eval-batches.
std::vector<cli::Flag<TrainOptions>> language_model_flags();

/// Throws InvalidArgument naming a flag that a GPT run cannot take (or a GPT flag another run
/// was given), and what to do instead.
void check_language_model_options(const TrainOptions& options);

}  // namespace ddp::train
