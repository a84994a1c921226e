// A small data set with learnable structure, written in the CIFAR-10 binary or IDX format, for
// tests and demos where the real data cannot be downloaded. Each class is a fixed random
// prototype image; each sample is its class's prototype blended with fresh noise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp::data {

/// What to generate.
struct SyntheticOptions {
  size_t train_size = 5000;
  size_t test_size = 1000;
  uint64_t seed = 0;
  /// Share of each pixel taken from the class prototype (the rest is noise): lower is harder.
  double signal = 0.5;
};

/// Writes `dir`/cifar-10-batches-bin/{data_batch_1..5,test_batch}.bin (3x32x32).
void write_synthetic_cifar10(const std::string& dir, const SyntheticOptions& options);

/// Writes `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (1x28x28), as MNIST ships.
void write_synthetic_idx(const std::string& dir, const SyntheticOptions& options);

/// Gzips `bytes` in memory (the format gzip(1) writes).
std::string gzip_bytes(const std::string& bytes);

}  // namespace ddp::data
