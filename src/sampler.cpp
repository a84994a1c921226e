#include "ddp/sampler.h"

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "ddp/error.h"

namespace ddp {

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank,
                                       SamplerOptions options)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), options_(options) {
  if (world_size < 1)
    throw InvalidArgument(c10::str("DistributedSampler: world size ", world_size, " < 1"));
  if (rank < 0 || rank >= world_size) {
    throw InvalidArgument(
        c10::str("DistributedSampler: rank ", rank, " is outside [0, ", world_size, ")"));
  }
  if (dataset_size < 0) throw InvalidArgument("DistributedSampler: negative data set size");
  size_shards();
}

void DistributedSampler::set_epoch_remainder(int64_t epoch, int64_t taken) {
  epoch_ = epoch;
  epoch_chosen_ = true;
  taken_ = std::clamp<int64_t>(taken, 0, dataset_size_);
  size_shards();
}

void DistributedSampler::size_shards() {
  const int64_t dataset_size = dataset_size_ - taken_;  // what this epoch still has
  const int world_size = world_size_;
  const SamplerOptions& options = options_;
  // As PyTorch: drop_last truncates to a multiple of the world size, otherwise pads up to one.
  if (options.drop_last() && dataset_size % world_size != 0) {
    num_samples_ = dataset_size / world_size;  // == ceil((n - world) / world)
  } else if (!options.drop_last() && !options.pad()) {
    num_samples_ = (dataset_size - rank_ + world_size - 1) / world_size;  // indices rank, rank+W..
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
  all.erase(all.begin(), all.begin() + std::ptrdiff_t(taken_));
  const size_t remaining = all.size();
  if (!options_.drop_last() && options_.pad()) {
    // Pad by repeating from the start, as many times as needed (PyTorch's math.ceil repeat).
    const int64_t padding = total_size_ - int64_t(all.size());
    for (int64_t i = 0; i < padding && remaining > 0; ++i)
      all.push_back(all[size_t(i) % remaining]);
  } else {
    all.resize(size_t(total_size_));  // truncated with drop_last, unchanged without padding
  }
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (int64_t i = rank_; i < total_size_; i += world_size_) mine.push_back(all[size_t(i)]);
  return mine;
}

void DistributedSampler::reset(c10::optional<size_t> new_size) {
  if (new_size) {
    dataset_size_ = int64_t(*new_size);
    taken_ = std::min(taken_, dataset_size_);
    size_shards();
  }
  if (resuming_ && !new_size) {  // the pass after load(): where the saved one was
    resuming_ = false;
    return;
  }
  resuming_ = false;
  if (started_ && !epoch_chosen_) {
    ++epoch_;
    if (taken_ != 0) {  // a remainder was that epoch's only: the next one is whole
      taken_ = 0;
      size_shards();
    }
  }
  started_ = true;
  epoch_chosen_ = false;
  order_ = indices();
  position_ = 0;
}

c10::optional<std::vector<size_t>> DistributedSampler::next(size_t batch_size) {
  if (!started_) reset();  // a loader that never reset: the first epoch
  if (position_ >= order_.size() || batch_size == 0) return c10::nullopt;
  const size_t end = std::min(order_.size(), position_ + batch_size);
  std::vector<size_t> batch(order_.begin() + std::ptrdiff_t(position_),
                            order_.begin() + std::ptrdiff_t(end));
  position_ = end;
  return batch;
}

void DistributedSampler::save(torch::serialize::OutputArchive& archive) const {
  const auto value = [](int64_t v) { return torch::tensor(v, torch::kInt64); };
  archive.write("epoch", value(epoch_), /*is_buffer=*/true);
  archive.write("position", value(int64_t(position_)), true);
  archive.write("shard", value(dataset_size_), true);  // size, world size, rank, seed
  archive.write("world_size", value(world_size_), true);
  archive.write("rank", value(rank_), true);
  archive.write("seed", value(int64_t(options_.seed())), true);
  archive.write("taken", value(taken_), true);
}

void DistributedSampler::load(torch::serialize::InputArchive& archive) {
  const auto read = [&](const char* key) {
    torch::Tensor t = torch::empty({}, torch::kInt64);
    archive.read(key, t, /*is_buffer=*/true);
    return t.item<int64_t>();
  };
  const int64_t size = read("shard"), world = read("world_size"), rank = read("rank");
  const int64_t seed = read("seed");
  if (size != dataset_size_ || world != world_size_ || rank != rank_ ||
      uint64_t(seed) != options_.seed()) {
    throw InvalidArgument(c10::str("DistributedSampler::load: saved for ", size, " samples, rank ",
                                   rank, " of ", world, ", seed ", seed, "; this sampler has ",
                                   dataset_size_, ", rank ", rank_, " of ", world_size_, ", seed ",
                                   options_.seed()));
  }
  epoch_ = read("epoch");
  torch::Tensor taken = torch::zeros({}, torch::kInt64);  // absent in older saves: 0
  archive.try_read("taken", taken, /*is_buffer=*/true);
  taken_ = std::clamp<int64_t>(taken.item<int64_t>(), 0, dataset_size_);
  size_shards();
  const int64_t position = read("position");
  started_ = true;
  resuming_ = true;
  epoch_chosen_ = false;
  order_ = indices();
  position_ = size_t(std::clamp<int64_t>(position, 0, int64_t(order_.size())));
}

}  // namespace ddp
