// ddp-train's training run as a recipe: set up (device, group, data, model, optimizer), then per
// epoch train → evaluate → report → checkpoint. The parts live in their own files:
// training_setup.h, model.h and optimizer.h (one face each, with or without DDP and ZeRO),
// evaluation.h, reporter.h (everything rank 0 says), fault.h (DDP_FAULT).
#pragma once

#include <vector>

#include "ddp/world.h"
#include "options.h"
#include "report/reporter.h"

namespace ddp::train {

/// Trains as `options` says, as rank world.rank of world.world_size; returns each epoch's result.
std::vector<EpochResult> run_training(const TrainOptions& options, const WorldInfo& world);

/// ddp-train evaluate: loads --checkpoint and evaluates it on the whole test set.
void run_evaluation(const TrainOptions& options, const WorldInfo& world);

/// --dry-run: prints the configuration and, for `world_size` ranks, the data shards and steps.
void print_plan(const TrainOptions& options, int world_size);

}  // namespace ddp::train
