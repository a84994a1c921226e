// The loader: N threads make the samples of the next batches (decode, transform) while the model
// trains on the current one, each sample written into its row of a batch allocated once, and the
// batches handed out strictly in order, so a run is the same whatever the number of threads.
// The time next() spends waiting is measured, so the claim that steps never wait can be checked.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <torch/types.h>

#include <torch/arg.h>

#include "ddp/data/dataset.h"
#include "ddp/data/sample_source.h"
#include "ddp/data/transforms.h"

namespace ddp::data {

/// One batch: images [B, ...] (float32 [B, C, H, W] for images) and labels [B, ...].
struct Batch {
  torch::Tensor images;
  torch::Tensor labels;
  int64_t index = 0;             // position in the epoch
  std::vector<int64_t> samples;  // the source's index of each row

  /// Moves images and labels to `device` (nothing happens on the device they are on); from
  /// pinned memory the copy is asynchronous (non_blocking), ordered on the device's stream.
  void to(torch::Device device) {
    images = images.to(device, /*non_blocking=*/images.is_pinned());
    labels = labels.to(device, /*non_blocking=*/labels.is_pinned());
  }
};

/// What happens when a sample's file cannot be read or decoded.
enum class OnBadSample {
  kStop,  // next() throws the error, naming the file
  kSkip,  // warn once per file, count it, and take a deterministic other sample in its place
};

/// How batches are cut and made.
struct LoaderOptions {
  TORCH_ARG(int64_t, batch_size) = 64;
  TORCH_ARG(bool,
            drop_last) = false;  // false keeps the last partial batch, as PyTorch's DataLoader
  /// Batches made ahead of time; with `threads` this bounds the memory: at most `prefetch`
  /// batches are being made or wait to be taken (refilled from a quarter full), besides those
  /// next() has handed out and the caller still holds.
  TORCH_ARG(int, prefetch) = 8;
  TORCH_ARG(int, threads) = 1;             // threads making samples
  TORCH_ARG(bool, channels_last) = false;  // images in NHWC memory (same logical shape)
  /// Batches in page-locked memory, for a GPU. They come from PyTorch's pinned-memory cache,
  /// which rounds each up to a power of two and keeps freed blocks for the next batches.
  TORCH_ARG(bool, pin_memory) = false;
  TORCH_ARG(OnBadSample, on_bad_sample) = OnBadSample::kStop;
  TORCH_ARG(uint64_t, seed) = 0;  // chooses the replacements of bad samples
  /// Used only by the constructor from a Dataset (the in-memory sets).
  TORCH_ARG(TransformOptions, transforms);
};

/// Batches over a list of indices into a source; one epoch at a time.
class Loader {
 public:
  Loader(std::shared_ptr<const SampleSource> source, LoaderOptions options);
  /// An in-memory image set through DatasetSource with options.transforms(); the data set must
  /// outlive the loader.
  Loader(const Dataset& dataset, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Starts producing the batches of `indices` (in order) for `epoch`; any epoch in progress is
  /// abandoned. `skip_batches` first batches are not produced (resuming mid-epoch).
  void start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t skip_batches = 0);

  /// The next batch, or nothing at the end of the epoch. Rethrows the error that this batch met
  /// (a bad file under OnBadSample::kStop, naming it; no memory for the batch), and again on
  /// every later call until start_epoch().
  std::optional<Batch> next();

  /// Number of batches the current epoch has in all.
  int64_t num_batches() const;

  /// Samples replaced so far because their file was bad (OnBadSample::kSkip).
  int64_t bad_samples() const { return bad_samples_.load(); }

  /// Makes one batch directly, on the calling thread: for tests and previews.
  Batch make_batch(const std::vector<int64_t>& indices, int64_t epoch, int64_t batch_index) const;

 private:
  struct Pending;
  void stop();
  void work();
  bool claim(int64_t& item);
  void start_batch(Pending& pending, int64_t batch) const;
  torch::Tensor allocate(int64_t rows, c10::IntArrayRef row_shape, torch::ScalarType type,
                         bool channels_last) const;
  void make_row(Pending& pending, const SampleContext& context) const;
  torch::Tensor copy_into(Pending& pending, const SampleContext& context) const;
  void place_label(Pending& pending, int64_t slot, const torch::Tensor& target) const;
  int64_t batch_rows(int64_t batch) const;

  std::shared_ptr<const SampleSource> source_;
  LoaderOptions options_;
  std::vector<int64_t> data_shape_;  // the source's, when it knows it beforehand
  std::vector<int64_t> indices_;
  int64_t epoch_ = 0;

  std::vector<std::thread> workers_;
  mutable std::mutex mutex_;
  std::condition_variable work_ready_;                   // a worker may claim a sample
  std::condition_variable batch_ready_;                  // a batch is complete, or a worker failed
  std::map<int64_t, std::unique_ptr<Pending>> pending_;  // batches being made or made
  int64_t next_item_ = 0;                                // next (batch * size + slot) to claim
  int64_t end_item_ = 0;
  int64_t next_batch_ = 0;  // the batch next() hands out next
  bool stopping_ = false;

  mutable std::mutex bad_mutex_;
  mutable std::set<int64_t> reported_bad_;  // indices already warned about
  mutable std::atomic<int64_t> bad_samples_{0};
};

}  // namespace ddp::data
