#include "ddp/data/loader.h"

#include <algorithm>

#include "ddp/error.h"

namespace ddp::data {

Loader::Loader(const Dataset& dataset, LoaderOptions options)
    : dataset_(dataset), options_(std::move(options)) {
  if (options_.batch_size() < 1) {
    throw InvalidArgument(concat("batch size ", options_.batch_size(), " must be at least 1"));
  }
  if (options_.prefetch() < 1) options_.prefetch(1);
  const auto& t = options_.transforms();
  const size_t channels = size_t(dataset.shape().channels);
  if (t.normalize() && (t.mean().size() != channels || t.std().size() != channels)) {
    throw InvalidArgument(concat("normalisation needs ", channels,
                                 " means and standard deviations, got ", t.mean().size(), " and ",
                                 t.std().size()));
  }
  for (float s : t.std()) {
    if (!(s > 0)) throw InvalidArgument("normalisation standard deviations must be positive");
  }
}

Loader::~Loader() { stop(); }

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (producer_.joinable()) producer_.join();
  stopping_ = false;
}

int64_t Loader::num_batches() const {
  const int64_t n = int64_t(indices_.size());
  return options_.drop_last() ? n / options_.batch_size()
                              : (n + options_.batch_size() - 1) / options_.batch_size();
}

void Loader::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t skip_batches) {
  stop();
  for (int64_t i : indices) {
    if (i < 0 || size_t(i) >= dataset_.size()) {
      throw InvalidArgument(
          concat("loader: index ", i, " outside the data set of ", dataset_.size()));
    }
  }
  indices_ = std::move(indices);
  epoch_ = epoch;
  ready_.clear();
  finished_ = false;
  error_ = nullptr;
  producer_ = std::thread([this, skip_batches] { produce(skip_batches); });
}

Batch Loader::make_batch(const std::vector<int64_t>& indices, int64_t epoch,
                         int64_t batch_index) const {
  const int64_t begin = batch_index * options_.batch_size();
  const int64_t end = std::min<int64_t>(begin + options_.batch_size(), int64_t(indices.size()));
  const int64_t count = end - begin;
  const ImageShape s = dataset_.shape();
  Batch batch;
  batch.index = batch_index;
  batch.images = torch::empty({count, s.channels, s.height, s.width}, torch::kFloat32);
  batch.labels = torch::empty({count}, torch::kInt64);
  float* pixels = batch.images.data_ptr<float>();
  int64_t* labels = batch.labels.data_ptr<int64_t>();
  for (int64_t j = 0; j < count; ++j) {
    const size_t index = size_t(indices[size_t(begin + j)]);
    transform_image(dataset_, index, options_.transforms(), epoch, batch_index, size_t(j),
                    pixels + size_t(j) * s.bytes());
    labels[j] = dataset_.label(index);
  }
  if (options_.channels_last()) {
    batch.images = batch.images.contiguous(torch::MemoryFormat::ChannelsLast);
  }
  return batch;
}

void Loader::produce(int64_t first_batch) {
  try {
    const int64_t total = num_batches();
    for (int64_t b = first_batch; b < total; ++b) {
      Batch batch = make_batch(indices_, epoch_, b);
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || int(ready_.size()) < options_.prefetch(); });
      if (stopping_) return;
      ready_.push_back(std::move(batch));
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  finished_ = true;
  changed_.notify_all();
}

std::optional<Batch> Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || finished_; });
  if (!ready_.empty()) {
    Batch batch = std::move(ready_.front());
    ready_.pop_front();
    // The producer, waiting with its next batch in hand, is woken once the queue is down to a
    // quarter and then makes batches until it is full again, rather than after every batch:
    // every wake is a chance for the scheduler to switch this thread out inside next(), which
    // with more workers than cores costs a whole time slice now and then.
    const bool wake = int(ready_.size()) <= std::max(1, options_.prefetch() / 4);
    lock.unlock();  // the woken producer would only block on the mutex
    if (wake) changed_.notify_all();
    return batch;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

}  // namespace ddp::data
