// What rank 0 tells the user, in one place: the configuration line, each logged step (stdout or
// the progress bar, metrics, TensorBoard), each epoch (a line, metrics, TensorBoard) and the
// summary table. On the other ranks a Reporter does nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddp/data/dataset.h"
#include "metrics.h"
#include "options.h"
#include "report/progress_line.h"
#include "report/stragglers.h"
#include "report/tensorboard.h"

namespace ddp::train {

/// What one epoch measured (the same on every rank after the all-reduces).
struct EpochResult {
  int epoch = 0;
  double train_loss = 0;
  double test_loss = 0;
  double test_acc = 0;                 // fraction in [0, 1]
  int64_t test_images = 0;             // evaluated, over all ranks (0 with --no-eval)
  double seconds = 0;                  // training part of the epoch
  double images_per_second = 0;        // all ranks together
  std::vector<double> class_accuracy;  // test accuracy by label (empty with --no-eval)
};

/// Phase times of the training steps of one epoch, on this rank.
struct StepTimes {
  double data_wait = 0, forward = 0, backward = 0, comm_exposed = 0, optimizer = 0;
};

/// An epoch's result and how it went: rank 0's metrics record.
struct EpochReport {
  EpochResult result;
  int64_t train_images = 0;  // over all ranks
  StepTimes times;           // rank 0's
  int64_t comm_bytes_per_step = 0;
  int64_t skipped_steps = 0;
  int64_t overflowed_steps = 0;   // --precision fp16: steps the loss scaler skipped
  double loss_scale = 1;          // --precision fp16: the loss scale at the epoch's end
  int64_t bad_samples = 0;        // samples replaced under --on-bad-sample skip, over all ranks
  double optimizer_state_mb = 0;  // rank 0's
  StragglerReport stragglers;
};

class Reporter {
 public:
  /// Opens rank 0's output files (--metrics, --tensorboard) first, so that a path that cannot
  /// be written fails before start-up's work; throws IoError naming it.
  Reporter(const TrainOptions& options, int rank, int world_size);

  bool is_root() const { return root_; }
  /// The names of the labels, for the per-class accuracy.
  void set_class_names(std::vector<std::string> names) { class_names_ = std::move(names); }
  /// The effective configuration: a stdout line and the first metrics record.
  void start();
  /// A new epoch of `steps` steps on this rank: the progress bar, on a terminal.
  void start_epoch(int epoch, int64_t steps);
  /// After step `step` (0-based) of the epoch, global step `global_step`, `images` on this rank
  /// so far. Reads the loss (a device sync) only on the steps it logs or draws.
  void step(int epoch, int64_t step, int64_t global_step, const torch::Tensor& loss, double lr,
            int64_t images);
  /// The epoch's line, metrics record and TensorBoard points.
  void end_epoch(const EpochReport& report, int64_t global_step);
  /// A change of the ranks (recovery/recovery.h): its metrics record.
  void membership_change(const JsonRecord& record);
  /// The run at a glance: a row per epoch, the best and final accuracy, the final per class.
  void summary(const std::vector<EpochResult>& results) const;

 private:
  TrainOptions options_;
  bool root_;
  int world_size_;
  std::vector<std::string> class_names_;
  MetricsWriter metrics_;
  std::optional<TensorBoardWriter> tensorboard_;
  std::unique_ptr<ProgressBar> progress_;
  int64_t epoch_steps_ = 0;
};

/// Every rank's last line: the final weights' fingerprint (equal on every rank when DDP kept
/// them in step) and the peak memory.
void print_fingerprint(int rank, torch::nn::Module& model);

}  // namespace ddp::train
