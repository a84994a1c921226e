// The prefetching loader: a background thread assembles the next batches (index → uint8 pixels
// → transformed float32) while the model trains on the current one, so a step never waits for
// data. The time next() spends waiting is measured, so the claim can be checked.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <torch/types.h>

#include <torch/arg.h>

#include "ddp/data/dataset.h"
#include "ddp/data/transforms.h"

namespace ddp::data {

/// One batch: images [B, C, H, W] float32 and labels [B] int64.
struct Batch {
  torch::Tensor images;
  torch::Tensor labels;
  int64_t index = 0;  // position in the epoch

  /// Moves images and labels to `device` (nothing happens on the device they are on).
  void to(torch::Device device) {
    images = images.to(device);
    labels = labels.to(device);
  }
};

/// How batches are cut and made.
struct LoaderOptions {
  TORCH_ARG(int64_t, batch_size) = 64;
  TORCH_ARG(bool,
            drop_last) = false;  // false keeps the last partial batch, as PyTorch's DataLoader
  TORCH_ARG(int, prefetch) = 8;  // batches made ahead of time (refilled from a quarter full)
  TORCH_ARG(bool, channels_last) = false;  // images in NHWC memory (same logical shape)
  TORCH_ARG(TransformOptions, transforms);
};

/// Batches over a list of indices into a data set; one epoch at a time.
class Loader {
 public:
  Loader(const Dataset& dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Starts producing the batches of `indices` (in order) for `epoch`; any epoch in progress is
  /// abandoned. `skip_batches` first batches are not produced (resuming mid-epoch).
  void start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t skip_batches = 0);

  /// The next batch, or nothing at the end of the epoch. Rethrows an error of the producer.
  std::optional<Batch> next();

  /// Number of batches the current epoch has in all.
  int64_t num_batches() const;

  /// Makes one batch directly (no thread): used by the producer and by tests.
  Batch make_batch(const std::vector<int64_t>& indices, int64_t epoch, int64_t batch_index) const;

 private:
  void stop();
  void produce(int64_t first_batch);

  const Dataset& dataset_;
  LoaderOptions options_;
  std::vector<int64_t> indices_;
  int64_t epoch_ = 0;

  std::thread producer_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  bool stopping_ = false;
  bool finished_ = false;
  std::exception_ptr error_;
};

}  // namespace ddp::data
