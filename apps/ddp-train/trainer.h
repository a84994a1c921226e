// ddp-train's training loop: data → sampler → loader → DDP forward/backward → SGD step, an
// evaluation over the whole test set after every epoch, metrics and a line per epoch on rank 0.
#pragma once

#include <vector>

#include "ddp/world.h"
#include "options.h"

namespace ddp::train {

/// What one epoch measured (the same on every rank after the all-reduces).
struct EpochResult {
  int epoch = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_acc = 0;                 // fraction in [0, 1]
  double seconds = 0;                  // training part of the epoch
  double images_per_second = 0;        // all ranks together
  std::vector<double> class_accuracy;  // test accuracy by label (empty with --no-eval)
};

/// Trains as `options` says, as rank world.rank of world.world_size; returns each epoch's result.
std::vector<EpochResult> run_training(const TrainOptions& options, const WorldInfo& world);

/// ddp-train evaluate: loads --checkpoint and evaluates it on the whole test set.
void run_evaluation(const TrainOptions& options, const WorldInfo& world);

/// --dry-run: prints the configuration and, for `world_size` ranks, the data shards and steps.
void print_plan(const TrainOptions& options, int world_size);

/// Intra-op threads for this worker: --threads, else OMP_NUM_THREADS, else cores / local workers.
int choose_threads(const TrainOptions& options, const WorldInfo& world, std::string& reason);

}  // namespace ddp::train
