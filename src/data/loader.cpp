#include "ddp/data/loader.h"

#include <algorithm>
#include <cstdio>

#include <c10/util/StringUtil.h>
#include <c10/util/accumulate.h>

#include "data/shape_text.h"
#include "data/splitmix.h"
#include "ddp/error.h"

namespace ddp::data {

// A batch being made: its tensors, allocated from the first sample that arrives (which gives the
// shapes), and how many of its rows are still to come.
struct Loader::Pending {
  Batch batch;
  int64_t remaining = 0;
  std::exception_ptr error;  // the first failure of one of its rows: next() rethrows it
};

namespace {

// How many replacements a bad sample gets before the loader gives up: a data set where ten
// random draws in a row are bad is not worth training on.
constexpr int kReplacementTries = 10;

}  // namespace

Loader::Loader(std::shared_ptr<const SampleSource> source, LoaderOptions options)
    : source_(std::move(source)), options_(std::move(options)) {
  if (!source_) throw InvalidArgument("loader: no sample source");
  if (options_.batch_size() < 1) {
    throw InvalidArgument(c10::str("batch size ", options_.batch_size(), " must be at least 1"));
  }
  if (options_.threads() < 1) {
    throw InvalidArgument(c10::str("loader threads ", options_.threads(), " must be at least 1"));
  }
  if (options_.prefetch() < 1) options_.prefetch(1);
  data_shape_ = source_->data_shape();
}

Loader::Loader(const Dataset& dataset, LoaderOptions options)
    : Loader(std::make_shared<DatasetSource>(dataset, options.transforms()), options) {}

Loader::~Loader() { stop(); }

void Loader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  batch_ready_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  pending_.clear();
  stopping_ = false;
}

int64_t Loader::num_batches() const {
  const int64_t n = int64_t(indices_.size());
  return options_.drop_last() ? n / options_.batch_size()
                              : (n + options_.batch_size() - 1) / options_.batch_size();
}

int64_t Loader::batch_rows(int64_t batch) const {
  const int64_t begin = batch * options_.batch_size();
  return std::min<int64_t>(options_.batch_size(), int64_t(indices_.size()) - begin);
}

void Loader::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t skip_batches) {
  for (int64_t i : indices) {  // before anything changes: a refused epoch leaves the loader as is
    if (i < 0 || size_t(i) >= source_->size()) {
      throw InvalidArgument(
          c10::str("loader: index ", i, " outside the data set of ", source_->size()));
    }
  }
  stop();
  indices_ = std::move(indices);
  epoch_ = epoch;
  next_batch_ = std::clamp<int64_t>(skip_batches, 0, num_batches());
  next_item_ = next_batch_ * options_.batch_size();
  end_item_ = std::min<int64_t>(num_batches() * options_.batch_size(), int64_t(indices_.size()));
  for (int i = 0; i < options_.threads(); ++i) workers_.emplace_back([this] { work(); });
}

// Takes the next sample to make, waiting while it belongs to a batch beyond the prefetch window.
bool Loader::claim(int64_t& item) {
  std::unique_lock<std::mutex> lock(mutex_);
  const int64_t size = options_.batch_size();
  work_ready_.wait(lock, [&] {
    return stopping_ || next_item_ >= end_item_ ||
           next_item_ / size < next_batch_ + options_.prefetch();
  });
  if (stopping_ || next_item_ >= end_item_) return false;
  item = next_item_++;
  if (item % size == 0) {  // its batch's first sample: items are claimed in order
    auto pending = std::make_unique<Pending>();
    pending->remaining = batch_rows(item / size);
    try {
      start_batch(*pending, item / size);
    } catch (...) {  // it cannot be allocated: the batch carries the error to next()
      pending->error = std::current_exception();
    }
    pending_.emplace(item / size, std::move(pending));
  }
  return true;
}

void Loader::start_batch(Pending& pending, int64_t batch) const {
  pending.batch.index = batch;
  pending.batch.samples.assign(size_t(batch_rows(batch)), -1);
  if (!data_shape_.empty()) {  // the source knows its samples' shape: allocate the batch now
    pending.batch.images = allocate(int64_t(pending.batch.samples.size()), data_shape_,
                                    torch::kFloat32, options_.channels_last());
  }
}

torch::Tensor Loader::allocate(int64_t rows, c10::IntArrayRef row_shape, torch::ScalarType type,
                               bool channels_last) const {
  std::vector<int64_t> sizes{rows};
  sizes.insert(sizes.end(), row_shape.begin(), row_shape.end());
  auto options = torch::TensorOptions(type).pinned_memory(options_.pin_memory());
  if (channels_last && sizes.size() == 4) {
    options = options.memory_format(torch::MemoryFormat::ChannelsLast);
  }
  try {
    return torch::empty(sizes, options);
  } catch (const c10::Error& e) {
    const double megabytes =
        double(c10::multiply_integers(sizes)) * double(c10::elementSize(type)) / (1024.0 * 1024.0);
    throw Error(c10::str("loader: cannot allocate a batch of ", c10::IntArrayRef(sizes), " (",
                         megabytes, " MiB", options_.pin_memory() ? ", page-locked" : "",
                         "; up to ", options_.prefetch(),
                         " are made ahead): ", e.what_without_backtrace(),
                         ". If memory is short, use a smaller batch or image size"));
  }
}

void Loader::work() {
  // No guard against LibTorch's intra-op threads here: c10::ParallelGuard does not stop
  // at::parallel_for (LibTorch 2.14, OpenMP or native) and LibTorch 1.13 has no such header. The
  // built-in sources write their rows with plain loops, so nothing here is split anyway.
  int64_t item = 0;
  while (claim(item)) {
    const int64_t size = options_.batch_size();
    const SampleContext context{indices_[size_t(item)], epoch_, item / size, item % size};
    Pending* pending = nullptr;
    bool failed = false;  // the batch has failed already: its other rows are not made
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending = pending_.at(context.batch).get();
      failed = pending->error != nullptr;
    }
    std::exception_ptr error;
    try {
      if (!failed) make_row(*pending, context);
    } catch (...) {
      // Kept with its batch: the steps before it still run, and a batch never asked for
      // (--max-steps) fails nothing.
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error && !pending->error) pending->error = error;
    if (--pending->remaining == 0) batch_ready_.notify_all();
  }
}

// Row `context.slot` of the batch: the sample at `context`, or under OnBadSample::kSkip, when its
// file is bad, a replacement drawn from (seed, epoch, index, try): the same on every run and on
// every number of threads. The batch's `samples` says which index each row came from.
void Loader::make_row(Pending& pending, const SampleContext& context) const {
  SampleContext c = context;
  for (int attempt = 0;; ++attempt) {
    try {
      pending.batch.samples[size_t(c.slot)] = c.index;
      const torch::Tensor target = data_shape_.empty()
                                       ? copy_into(pending, c)
                                       : source_->write(c, pending.batch.images[c.slot]);
      place_label(pending, c.slot, target);
      return;
    } catch (const Error& e) {
      const bool bad_file = dynamic_cast<const DataError*>(&e) || dynamic_cast<const IoError*>(&e);
      if (!bad_file || options_.on_bad_sample() == OnBadSample::kStop) throw;
      if (attempt + 1 >= kReplacementTries) {
        throw DataError(c10::str(e.what(), " (and its ", kReplacementTries - 1,
                                 " replacements were bad too: stopping)"));
      }
      bad_samples_.fetch_add(1);
      {
        std::lock_guard<std::mutex> lock(bad_mutex_);
        if (reported_bad_.insert(c.index).second) {
          std::fprintf(stderr, "warning: skipping a bad sample: %s\n", e.what());
        }
      }
      const uint64_t key = splitmix64(
          options_.seed() ^ splitmix64(uint64_t(context.epoch) ^
                                       splitmix64(uint64_t(context.index) ^ splitmix64(attempt))));
      c.index = int64_t(key % source_->size());
    }
  }
}

// get() and a copy into the row, the batch allocated from the first sample that arrives.
torch::Tensor Loader::copy_into(Pending& pending, const SampleContext& context) const {
  const Example example = source_->get(context);
  if (!example.data.defined() || !example.target.defined()) {
    throw InvalidArgument(c10::str("sample ", context.index, " has no data or no target tensor"));
  }
  Batch& b = pending.batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!b.images.defined()) {
      b.images = allocate(int64_t(b.samples.size()), example.data.sizes(),
                          example.data.scalar_type(), options_.channels_last());
    }
  }
  const torch::Tensor row = b.images[context.slot];
  if (row.sizes() != example.data.sizes() || row.scalar_type() != example.data.scalar_type()) {
    throw InvalidArgument(c10::str("loader: sample ", context.index, " (row ", context.slot,
                                   " of batch ", b.index, ") is ", shape_text(example.data),
                                   ", another of its batch ", shape_text(row),
                                   ": every sample of a batch needs the same shape and type"));
  }
  row.copy_(example.data);
  return example.target;
}

void Loader::place_label(Pending& pending, int64_t slot, const torch::Tensor& target) const {
  Batch& b = pending.batch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!b.labels.defined()) {
      b.labels = allocate(int64_t(b.samples.size()), target.sizes(), target.scalar_type(), false);
    }
  }
  const torch::Tensor label = b.labels[slot];
  if (label.sizes() != target.sizes() || label.scalar_type() != target.scalar_type()) {
    throw InvalidArgument(c10::str("loader: the target of sample ", b.samples[size_t(slot)], " is ",
                                   shape_text(target), ", another of its batch ", shape_text(label),
                                   ": every target needs the same shape and type"));
  }
  label.copy_(target);
}

Batch Loader::make_batch(const std::vector<int64_t>& indices, int64_t epoch,
                         int64_t batch_index) const {
  const int64_t size = options_.batch_size();
  const int64_t begin = batch_index * size;
  const int64_t end = std::min<int64_t>(begin + size, int64_t(indices.size()));
  if (batch_index < 0 || begin >= int64_t(indices.size())) {
    throw InvalidArgument(c10::str("loader: batch ", batch_index, " of ", indices.size(),
                                   " indices in batches of ", size, " does not exist"));
  }
  Pending pending;
  pending.batch.index = batch_index;
  pending.batch.samples.assign(size_t(std::max<int64_t>(0, end - begin)), -1);
  if (!data_shape_.empty()) {
    pending.batch.images = allocate(int64_t(pending.batch.samples.size()), data_shape_,
                                    torch::kFloat32, options_.channels_last());
  }
  for (int64_t j = 0; j < end - begin; ++j) {
    make_row(pending, {indices[size_t(begin + j)], epoch, batch_index, j});
  }
  return std::move(pending.batch);
}

std::optional<Batch> Loader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (next_batch_ >= num_batches()) return std::nullopt;
  auto it = pending_.end();
  batch_ready_.wait(lock, [&] {
    it = pending_.find(next_batch_);
    return it != pending_.end() && it->second->remaining == 0;
  });
  if (it->second->error) std::rethrow_exception(it->second->error);
  Batch batch = std::move(it->second->batch);
  pending_.erase(it);
  ++next_batch_;
  // The workers, waiting with the window full, are woken once it is down to a quarter and then
  // fill it again, rather than after every batch: every wake is a chance for the scheduler to
  // switch this thread out inside next(), which with more threads than cores costs a whole time
  // slice now and then.
  const int64_t ahead = next_item_ / options_.batch_size() - next_batch_;
  const bool wake = ahead <= std::max(1, options_.prefetch() / 4);
  lock.unlock();
  if (wake) work_ready_.notify_all();
  return batch;
}

}  // namespace ddp::data
