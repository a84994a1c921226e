// Flags that only make sense together: checked once the command line, the preset and --config
// are merged, each refusal naming the flags and what to do instead.
#pragma once

#include "options.h"

namespace ddp::train {

/// Throws InvalidArgument for the first combination of flags that cannot work.
void check_combinations(const TrainOptions& options);

}  // namespace ddp::train
