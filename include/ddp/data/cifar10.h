// CIFAR-10 in its binary layout (cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin):
// records of 1 label byte + 3072 bytes of CHW pixels. The files are memory-mapped, so workers on
// one machine share one copy of the data through the page cache.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ddp/data/dataset.h"

namespace ddp::data {

class MappedFile;

/// Bytes of one CIFAR-10 record: the label, then 3 x 32 x 32 pixels.
constexpr size_t kCifarRecordBytes = 1 + 3 * 32 * 32;

/// CIFAR-10 (binary version) read from `dir`, which may be cifar-10-batches-bin itself or the
/// directory that holds it.
class Cifar10Dataset : public Dataset {
 public:
  Cifar10Dataset(const std::string& dir, Split split);
  ~Cifar10Dataset() override;

  size_t size() const override { return size_; }
  ImageShape shape() const override { return {3, 32, 32}; }
  int num_classes() const override { return 10; }
  const uint8_t* image(size_t index) const override { return record(index) + 1; }
  int label(size_t index) const override { return record(index)[0]; }
  std::string description() const override { return description_; }

  /// The batch files of a split, in order ("data_batch_1.bin", ...).
  static std::vector<std::string> file_names(Split split);
  /// `dir` itself if it holds the batch files, else `dir`/cifar-10-batches-bin; throws IoError
  /// saying what was looked for when neither does.
  static std::string resolve_dir(const std::string& dir, Split split);

 private:
  const uint8_t* record(size_t index) const;

  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<size_t> first_index_;  // index of each file's first record
  size_t size_ = 0;
  std::string description_;
};

}  // namespace ddp::data
