// Checkpoints that do not stop training. write() copies the state into host memory — the only
// stall, a copy of the weights and the optimizer state — and a background thread pickles it,
// writes it to a temporary file, fsyncs and renames it, then prunes the oldest: a process killed
// during the write leaves the previous checkpoint as it was. One write at a time: a write() while
// the previous one is still in flight waits for it first.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <torch/torch.h>

#include "ddp/checkpoint/checkpoint.h"

namespace ddp {

class AsyncCheckpointWriter {
 public:
  /// After each write, all but the `keep` newest checkpoints of the file's directory are deleted
  /// (0: none is).
  explicit AsyncCheckpointWriter(int keep = 0);
  /// Waits for the write in flight (its error, if any, is printed, not thrown).
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  /// Snapshots `module`, `optimizer` and `state` now and writes them to `path` in the
  /// background. Rethrows the previous write's error, if it failed.
  void write(const std::string& path, const torch::nn::Module& module,
             torch::optim::Optimizer& optimizer, const CheckpointState& state);

  /// Waits until the write in flight is on disk; rethrows its error (IoError: disk full, ...).
  void wait();

  /// Seconds the last write() took (the stall) and its background write took.
  double last_snapshot_seconds() const { return snapshot_seconds_; }
  double last_write_seconds() const;

 private:
  int keep_;
  std::thread writer_;
  mutable std::mutex mutex_;
  std::exception_ptr error_;
  double snapshot_seconds_ = 0;
  double write_seconds_ = 0;
};

}  // namespace ddp
