// A small data set with learnable structure, written in the CIFAR-10 binary or IDX format, for
// tests and demos where the real data cannot be downloaded. Each class is a fixed random
// prototype image; each sample is its class's prototype blended with fresh noise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <torch/arg.h>

namespace ddp::data {

/// What to generate.
struct SyntheticOptions {
  SyntheticOptions() = default;
  /// `train_size` training and `test_size` test images.
  SyntheticOptions(size_t train_size, size_t test_size)
      : train_size_(train_size), test_size_(test_size) {}

  TORCH_ARG(size_t, train_size) = 5000;
  TORCH_ARG(size_t, test_size) = 1000;
  TORCH_ARG(uint64_t, seed) = 0;
  /// Share of each pixel taken from the class prototype (the rest is noise): lower is harder.
  TORCH_ARG(double, signal) = 0.5;
};

/// Writes `dir`/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin (3x32x32).
void write_synthetic_cifar10(const std::string& dir, const SyntheticOptions& options);

/// Writes `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (1x28x28), as MNIST ships.
void write_synthetic_idx(const std::string& dir, const SyntheticOptions& options);

/// Gzips `bytes` in memory (the format gzip(1) writes).
std::string gzip_bytes(const std::string& bytes);

}  // namespace ddp::data
