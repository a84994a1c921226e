// DistributedDataParallel's first check: every rank holds the same model (parameter and buffer
// names, dtypes and shapes, in order). Internal to libddp.
#pragma once

#include <torch/torch.h>

#include "ddp/process_group.h"

namespace ddp {

/// Compares this rank's module with rank 0's through the group's store, so that every rank
/// reports the same mismatch instead of hanging in a broadcast of differently shaped tensors.
/// Throws DistributedError naming the first rank and entry that differ, TimeoutError naming a
/// rank that never got here.
void check_same_module_on_every_rank(const torch::nn::Module& module, ProcessGroup& group);

}  // namespace ddp
