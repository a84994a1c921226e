// DistributedSampler with PyTorch's exact semantics: every rank sees a disjoint shard of the
// data set (padded to equal length by repeating indices, or truncated with drop_last), shuffled
// by randperm with a generator seeded seed + epoch, so call set_epoch() every epoch. With
// pad = false every image is visited exactly once and the shards differ in length by at most
// one: train with ddp::Join (join.h) so the ranks with fewer batches do not hang the others.
//
// It is also a LibTorch sampler: torch::data::make_data_loader(dataset, sampler, options) hands
// out this rank's shard in batches. LibTorch's loader owns its copy of the sampler and resets it
// at every pass (begin()), so each reset moves on to the next epoch by itself, unless
// set_epoch() chose one since the last reset.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/arg.h>
#include <torch/data/samplers/base.h>

namespace ddp {

/// Options of DistributedSampler, with torch.utils.data.distributed.DistributedSampler's
/// defaults.
struct SamplerOptions {
  TORCH_ARG(bool, shuffle) = true;
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(bool, drop_last) = false;
  /// Repeat indices so every rank gets the same number (PyTorch's behaviour). false: rank r
  /// gets indices r, r + W, r + 2W, ... of the shuffled order, nothing repeated (ignored with
  /// drop_last).
  TORCH_ARG(bool, pad) = true;
};

/// The indices one rank visits in one epoch.
class DistributedSampler : public torch::data::samplers::Sampler<> {
 public:
  /// `dataset_size` items over `world_size` ranks; this is rank `rank`'s sampler. Throws
  /// InvalidArgument for rank outside [0, world_size) or an empty data set with drop_last.
  DistributedSampler(int64_t dataset_size, int world_size, int rank, SamplerOptions options = {});

  /// Chooses the epoch whose order indices() returns (the seed is seed + epoch).
  void set_epoch(int64_t epoch) { set_epoch_remainder(epoch, 0); }
  /// Chooses the rest of epoch `epoch` after its first `taken` indices: what a run at another
  /// world size had visited when it stopped, its ranks' shards interleaved (rank r's k-th index
  /// is the global order's k * world + r). The rest is sharded over this world as a whole epoch
  /// would be (padded, truncated or not by the same options), so that nothing is dropped or
  /// seen twice in the epoch beyond what padding repeats. num_samples() is then this part's.
  void set_epoch_remainder(int64_t epoch, int64_t taken);
  int64_t epoch() const { return epoch_; }

  /// This rank's indices for the current epoch, in visiting order.
  std::vector<int64_t> indices() const;

  /// Number of indices of this rank (the same on every rank unless pad is false).
  int64_t num_samples() const { return num_samples_; }
  /// Number of indices over all ranks (num_samples() * world size when padded or truncated;
  /// the data set's size without padding).
  int64_t total_size() const { return total_size_; }
  const SamplerOptions& options() const { return options_; }

  // LibTorch's sampler interface (torch::data::make_data_loader). It speaks c10::optional:
  // std::optional itself in recent LibTorch, a type of its own in 1.13 (Debian 12's).
  /// Starts a pass: the next epoch (or the one set_epoch() chose); `new_size` re-sizes the data
  /// set.
  void reset(c10::optional<size_t> new_size = c10::nullopt) override;
  /// Up to `batch_size` of this rank's next indices; nothing at the end of the epoch.
  c10::optional<std::vector<size_t>> next(size_t batch_size) override;
  /// The epoch and the position in it, so a loader resumes where it was: the reset() that
  /// LibTorch's loader makes at its next pass keeps them. load() checks the shard is the same.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void size_shards();

  int64_t dataset_size_;
  int world_size_;
  int rank_;
  SamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t taken_ = 0;  // indices of the epoch's global order visited before (set_epoch_remainder)
  int64_t num_samples_ = 0;
  int64_t total_size_ = 0;
  // LibTorch's interface: the epoch's order and how far a loader has taken it.
  bool epoch_chosen_ = false;  // set_epoch() since the last reset()
  bool started_ = false;       // reset() has run
  bool resuming_ = false;      // load() ran: the next reset() keeps its epoch and position
  std::vector<int64_t> order_;
  size_t position_ = 0;
};

}  // namespace ddp
