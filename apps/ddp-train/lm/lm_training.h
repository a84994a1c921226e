// Training a GPT (--model gpt-*) on a token data set (--dataset tokens), replicated (--parallel
// ddp) or sharded (--parallel fsdp): nanoGPT's train.py, step by step the same, so that its
// losses can be compared with bench/nanogpt_reference.py's.
#pragma once

#include "ddp/world.h"
#include "options.h"

namespace ddp::train {

/// Trains as `options` says, as rank world.rank of world.world_size.
void run_language_model_training(const TrainOptions& options, const WorldInfo& world);

/// --dry-run: the configuration, the data and the model's shape, the steps.
void print_language_model_plan(const TrainOptions& options, int world_size);

}  // namespace ddp::train
