// Checkpoints and state dicts. A checkpoint holds the model, the optimizer's state (SGD, Adam),
// the epoch and step, the RNG state, the config that made it and a format version; it is written
// by rank 0 only, atomically (temporary file, fsync, rename), so a crash leaves the previous one
// intact. Files are pickled dicts of tensors and plain values only: loading one never runs code.
// State dicts (export_state_dict) load in Python with torch.load + load_state_dict, and Python's
// torch.save(net.state_dict(), ...) files load here (read_state_dict).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace ddp {

/// The checkpoint format this build writes and reads.
constexpr int64_t kCheckpointVersion = 1;

/// Where a run stood when the checkpoint was written.
struct CheckpointState {
  int64_t epoch = 0;          // epochs completed
  int64_t step_in_epoch = 0;  // steps of the next epoch already taken (0: at an epoch's end)
  /// Samples of the next epoch's order visited at another world size before those steps began
  /// (DistributedSampler::set_epoch_remainder); 0 when the epoch began at this world size.
  int64_t taken_in_epoch = 0;
  /// Steps of the next epoch taken at other world sizes before those: the file names go on
  /// counting from them, so that a newer checkpoint never sorts before an older one.
  int64_t earlier_steps_in_epoch = 0;
  int64_t global_step = 0;  // optimizer steps taken
  int64_t world_size = 1;
  std::string config;       // the effective configuration, as text
  torch::Tensor rng_state;  // torch's default CPU generator
};

/// Writes `module`'s parameters and buffers, `optimizer`'s state (SGD or Adam) and `state` to
/// `path` atomically. Throws IoError (disk full, read-only directory); the old file survives.
void save_checkpoint(const std::string& path, const torch::nn::Module& module,
                     torch::optim::Optimizer& optimizer, const CheckpointState& state);

/// Loads a checkpoint into `module` (and `optimizer` when not null). Throws DataError naming the
/// file for a truncated or foreign file, a wrong format version, or a model whose parameter
/// names or shapes differ (all differences listed).
CheckpointState load_checkpoint(const std::string& path, torch::nn::Module& module,
                                torch::optim::Optimizer* optimizer);

/// Writes the module's state dict (parameters and buffers by name) for Python's torch.load.
void export_state_dict(const std::string& path, const torch::nn::Module& module);

/// Writes named tensors as a dict that Python's torch.load reads (weights_only included).
void save_tensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors);

/// Reads a state dict: one written by export_state_dict, a checkpoint's model part, or
/// Python's torch.save(module.state_dict(), path).
std::map<std::string, torch::Tensor> read_state_dict(const std::string& path);

/// Copies `state` into `module`; every name must exist with the same shape, both ways. Throws
/// DataError listing the differences, naming `source`.
void load_state_dict(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& state,
                     const std::string& source);

/// DIR/checkpoint-epoch-NNNN.pt at an epoch's end, DIR/checkpoint-epoch-NNNN-step-SSSSSSSS.pt
/// `step_in_epoch` steps into the next epoch.
std::string checkpoint_path(const std::string& dir, int64_t epoch, int64_t step_in_epoch = 0);
/// The newest checkpoint in `dir` (by epoch, then step in the epoch), or "" when there is none.
std::string latest_checkpoint(const std::string& dir);
/// Deletes all but the `keep` newest checkpoints in `dir`.
void prune_checkpoints(const std::string& dir, int keep);

}  // namespace ddp
