// What the loader reads from: any indexed collection of (data, target) tensor pairs. The image
// folders, the in-memory image sets and a user's own data (text, tables, anything) all implement
// this one small interface, and then get the loader's threads, batching and ordering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/types.h>

#include "ddp/data/dataset.h"
#include "ddp/data/transforms.h"

namespace ddp::data {

/// One sample: the tensors that become row `slot` of a batch.
struct Example {
  torch::Tensor data;    // every sample of a batch has the same shape and dtype
  torch::Tensor target;  // a scalar (a label) or any fixed shape
};

/// Where a sample is asked for: random transforms draw from these, never from a shared
/// generator, so a sample is the same whichever thread makes it and whenever.
struct SampleContext {
  int64_t index = 0;  // the sample's index in the source
  int64_t epoch = 0;
  int64_t batch = 0;  // the batch's position in the epoch
  int64_t slot = 0;   // the sample's row in that batch
};

/// An indexed source of samples; get() is called from several threads at once.
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  /// Number of samples.
  virtual size_t size() const = 0;
  /// Sample `context.index`. A file that cannot be read or decoded throws IoError or DataError
  /// naming it (the loader's on_bad_sample policy applies to those two only).
  virtual Example get(const SampleContext& context) const = 0;

  /// The shape of every sample's float32 data, when the source knows it beforehand (empty: it
  /// does not). The loader then allocates each batch at once and calls write() for its rows.
  virtual std::vector<int64_t> data_shape() const { return {}; }
  /// Writes sample `context.index`'s data into `row` (data_shape(), float32, possibly strided)
  /// and returns its target: the same as get(), without a tensor per sample and its copy.
  virtual torch::Tensor write(const SampleContext& context, const torch::Tensor& row) const;
};

/// An in-memory image set with the transforms of transforms.h: float32 CHW images and
/// int64 labels, exactly what transform_image() writes. The data set must outlive it.
class DatasetSource : public SampleSource {
 public:
  DatasetSource(const Dataset& dataset, TransformOptions transforms);
  /// The same, owning the data set.
  DatasetSource(std::shared_ptr<const Dataset> dataset, TransformOptions transforms);
  size_t size() const override { return dataset_.size(); }
  Example get(const SampleContext& context) const override;

 private:
  std::shared_ptr<const Dataset> owned_;
  const Dataset& dataset_;
  TransformOptions transforms_;
};

}  // namespace ddp::data
