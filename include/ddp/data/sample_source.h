// What the loader reads from: any indexed collection of (data, target) tensor pairs. The image
// folders, the in-memory image sets and a user's own data (text, tables, anything) all implement
// this one small interface, and then get the loader's threads, batching and ordering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

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
};

/// An in-memory image set with the per-batch transforms of transforms.h: float32 CHW images and
/// int64 labels, exactly what transform_image() writes. The data set must outlive it.
class DatasetSource : public SampleSource {
 public:
  DatasetSource(const Dataset& dataset, TransformOptions transforms);
  size_t size() const override { return dataset_.size(); }
  Example get(const SampleContext& context) const override;

 private:
  const Dataset& dataset_;
  TransformOptions transforms_;
};

}  // namespace ddp::data
