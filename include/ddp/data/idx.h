// MNIST and Fashion-MNIST in the IDX format (train-images-idx3-ubyte[.gz] and friends), gzip or
// plain. Headers are checked against the data before anything large is allocated.
#pragma once

#include <string>
#include <vector>

#include "ddp/data/dataset.h"

namespace ddp::data {

/// An IDX image file and its label file, decoded into memory.
class IdxDataset : public Dataset {
 public:
  /// Reads `prefix`-images-idx3-ubyte[.gz] and `prefix`-labels-idx1-ubyte[.gz] from `dir`
  /// (`prefix` is "train" or "t10k"); `name` is used in messages ("Fashion-MNIST").
  IdxDataset(const std::string& dir, Split split, const std::string& name);

  size_t size() const override { return labels_.size(); }
  ImageShape shape() const override { return shape_; }
  int num_classes() const override { return 10; }
  const uint8_t* image(size_t index) const override {
    return images_.data() + index * shape_.bytes();
  }
  int label(size_t index) const override { return labels_[index]; }
  std::string description() const override { return description_; }

  /// "train" or "t10k", as the IDX files are named.
  static const char* file_prefix(Split split);

 private:
  std::vector<uint8_t> images_;
  std::vector<uint8_t> labels_;
  ImageShape shape_;
  std::string description_;
};

/// Reads a whole file, gunzipping it when it starts with the gzip magic; at most `max_bytes`
/// are accepted (a forged header cannot make it allocate more). Throws IoError / DataError.
std::vector<uint8_t> read_maybe_gzip(const std::string& path, size_t max_bytes);

}  // namespace ddp::data
