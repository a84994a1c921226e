// Turning uint8 CHW images into the float batch the model sees. The default is exactly
// torchvision's ToTensor() (float32, divided by 255); normalisation, random crop with padding and
// horizontal flip are optional. Random choices come from (seed, epoch, image index) alone, so an
// image is the same whichever rank, batch or thread makes it, and whenever: runs are reproducible
// and resumable.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include <torch/arg.h>

#include "ddp/data/dataset.h"

namespace ddp::data {

/// The optional transforms; all off by default.
struct TransformOptions {
  TORCH_ARG(bool, normalize) = false;
  TORCH_ARG(std::vector<float>, mean);  // one per channel, used when normalize
  TORCH_ARG(std::vector<float>, std);   // one per channel, used when normalize
  TORCH_ARG(int, crop_padding) = 0;     // > 0: random crop of the original size after zero padding
  TORCH_ARG(bool, horizontal_flip) = false;
  TORCH_ARG(uint64_t, seed) = 0;
};

/// Per-channel mean and standard deviation commonly used for each data set's normalisation.
void default_normalization(DatasetKind kind, std::vector<float>& mean, std::vector<float>& std);

/// Writes image `index` of `dataset`, transformed, as floats into `out` (shape().bytes()
/// values). The random transforms are drawn from (seed, epoch, index): the same image gets the
/// same crop and flip in an epoch whatever the rank, world size, batch size or thread.
void transform_image(const Dataset& dataset, size_t index, const TransformOptions& options,
                     int64_t epoch, float* out);

}  // namespace ddp::data
