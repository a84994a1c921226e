// What a training run works with once it is set up (trainer.cpp), and where it stands: shared by
// the epoch loop and by what happens when the group changes under it (recovery/recovery.h).
#pragma once

#include <cstdint>

#include "ddp/checkpoint/async_checkpoint.h"
#include "ddp/checkpoint/checkpoint.h"
#include "ddp/sampler.h"
#include "report/chrome_trace.h"
#include "report/reporter.h"
#include "report/step_trace.h"
#include "report/stragglers.h"
#include "train/fault.h"
#include "train/model.h"
#include "train/optimizer.h"
#include "train/training_setup.h"

namespace ddp::train {

class Recovery;

// Where a run starts: after a checkpoint's epoch and step, or at the beginning.
struct Position {
  int epoch = 1;              // the first epoch to train
  int64_t step_in_epoch = 0;  // its steps already taken (a mid-epoch checkpoint's)
  int64_t global_step = 0;
  // Samples of that epoch visited at other world sizes (its order's first ones): the rest is
  // re-sharded over this world. And those steps, which the checkpoints' names count on from.
  int64_t taken_in_epoch = 0;
  int64_t earlier_steps = 0;
};

/// Where a checkpoint's `state` puts a run of `world_size` ranks of `batch_size` each: at the
/// same world size the epoch's steps are skipped (bit-exact); at another, what the checkpoint's
/// world visited of the epoch is skipped and the rest shared out.
Position position_from(const CheckpointState& state, int world_size, int64_t batch_size);

// Everything an epoch of training works with, set up once. Built from the options and the
// set-up, then each part given by name (run_training()):
//   Training t(o, s);
//   t.model = &model;
//   t.optimizer = &optimizer;  // ... every part, before the first step
struct Training {
  Training(const TrainOptions& options, TrainingSetup& setup) : options(options), setup(setup) {}

  const TrainOptions& options;
  TrainingSetup& setup;  // its group, rank and world size change under --on-failure continue
  // The parts, owned by run_training():
  TrainedModel* model = nullptr;
  TrainOptimizer* optimizer = nullptr;
  DistributedSampler* sampler = nullptr;
  data::Loader* loader = nullptr;
  StepTrace* trace = nullptr;
  ChromeTrace* chrome_trace = nullptr;
  Reporter* reporter = nullptr;
  AsyncCheckpointWriter* step_checkpoints = nullptr;  // --checkpoint-every-steps
  Recovery* recovery = nullptr;  // what a membership change does (recovery/recovery.h)
  Fault fault;
  StragglerWatch stragglers;
  // Where the run stands.
  int64_t global_step = 0;
  int64_t taken_in_epoch = 0;  // of the epoch running: see Position
  int64_t earlier_steps = 0;   // likewise
  bool has_state = true;       // false: a newcomer, until a peer's state arrives
};

/// This world's shard of epoch `epoch`: what t.taken_in_epoch leaves of its order, shared out
/// over the current ranks, and the loader started on it `first_step` steps in (at an epoch's
/// start, and under --on-failure continue after each change of the ranks).
void start_epoch_shard(Training& t, int epoch, int64_t first_step);

/// The run's place, for a checkpoint: epoch `epoch` done, or `steps_taken` steps of it taken at
/// this world size (after t.taken_in_epoch samples at others).
CheckpointState position_of(const Training& t, int epoch, int64_t steps_taken, bool epoch_done);

}  // namespace ddp::train
