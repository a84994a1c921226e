#include "ddp/sampler.h"

#include <torch/torch.h>

#include "ddp/error.h"

namespace ddp {

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank,
                                       SamplerOptions options)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), options_(options) {
  if (world_size < 1)
    throw InvalidArgument(concat("DistributedSampler: world size ", world_size, " < 1"));
  if (rank < 0 || rank >= world_size) {
    throw InvalidArgument(
        concat("DistributedSampler: rank ", rank, " is outside [0, ", world_size, ")"));
  }
  if (dataset_size < 0) throw InvalidArgument("DistributedSampler: negative data set size");
  // As PyTorch: drop_last truncates to a multiple of the world size, otherwise pads up to one.
  if (options.drop_last() && dataset_size % world_size != 0) {
    num_samples_ = dataset_size / world_size;  // == ceil((n - world) / world)
  } else if (!options.drop_last() && !options.pad()) {
    num_samples_ = (dataset_size - rank + world_size - 1) / world_size;  // indices rank, rank+W..
    total_size_ = dataset_size;
    return;
  } else {
    num_samples_ = (dataset_size + world_size - 1) / world_size;
  }
  total_size_ = num_samples_ * world_size;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> all;
  all.reserve(size_t(std::max(total_size_, dataset_size_)));
  if (options_.shuffle()) {
    auto gen = at::detail::createCPUGenerator(options_.seed() + uint64_t(epoch_));
    const torch::Tensor perm = torch::randperm(dataset_size_, gen, torch::kLong);
    const int64_t* p = perm.data_ptr<int64_t>();
    all.assign(p, p + dataset_size_);
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) all.push_back(i);
  }
  if (!options_.drop_last() && options_.pad()) {
    // Pad by repeating from the start, as many times as needed (PyTorch's math.ceil repeat).
    const int64_t padding = total_size_ - int64_t(all.size());
    for (int64_t i = 0; i < padding && !all.empty(); ++i)
      all.push_back(all[size_t(i % dataset_size_)]);
  } else {
    all.resize(size_t(total_size_));  // truncated with drop_last, unchanged without padding
  }
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (int64_t i = rank_; i < total_size_; i += world_size_) mine.push_back(all[size_t(i)]);
  return mine;
}

}  // namespace ddp
