// What training and evaluation both stand on, set up once per process: intra-op threads, the
// device, the process group, the data sets and the model (seeded, synchronised batch norm, on the
// device). Every rank-0 line of start-up is printed here.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddp/data/dataset.h"
#include "ddp/data/loader.h"
#include "ddp/fault_tolerance/fault_tolerance.h"
#include "ddp/models/classifier.h"
#include "ddp/precision.h"
#include "ddp/process_group.h"
#include "ddp/world.h"
#include "options.h"
#include "train/training_data.h"

namespace ddp::train {

struct TrainingSetup {
  WorldInfo world;
  torch::Device device = torch::kCPU;
  Precision precision = Precision::kFp32;
  std::string backend;                  // the process group's ("none" on one rank)
  std::shared_ptr<ProcessGroup> group;  // null on one rank
  /// --on-failure continue (the launcher's DDP_ON_FAILURE): the group's generations; `group`,
  /// world.rank and world.world_size follow its current generation (recovery/recovery.h). Null
  /// otherwise.
  std::shared_ptr<FaultTolerantGroup> ft;
  /// Started by the launcher to join the running job (FaultTolerantGroup::is_newcomer): rank -1
  /// until admitted, its state from a peer.
  bool newcomer = false;
  TrainingData data;
  std::shared_ptr<models::ClassifierImpl> model;
  data::LoaderOptions loader_options;  // the training loader's

  bool is_root() const { return world.rank == 0; }
};

/// The process alone: threads, memory, device and the process group (not the data or the
/// model), its start-up lines printed by rank 0.
TrainingSetup set_up_process(const TrainOptions& options, const WorldInfo& world);

/// Sets this process up as `options` and the launcher's environment say. Throws ddp::Error
/// naming the flag, the file or the rank for anything that cannot be used.
TrainingSetup set_up_training(const TrainOptions& options, const WorldInfo& world);

/// Intra-op threads for this worker: --threads, else OMP_NUM_THREADS, else cores / local workers;
/// `reason` says which.
int choose_threads(const TrainOptions& options, const WorldInfo& world, std::string& reason);

/// --data-dir, or where the data set is found by default.
std::string data_dir_of(const TrainOptions& options);

/// Sums `values` over all ranks in place (unchanged without a group).
void sum_over_ranks(ProcessGroup* group, std::vector<double>& values);

/// The largest of `value` over all ranks (itself without a group).
double max_over_ranks(ProcessGroup* group, double value);

/// A flag's seconds as the library's milliseconds.
std::chrono::milliseconds to_ms(double seconds);

}  // namespace ddp::train
