// The one small interface every data set implements: N labelled images held in memory (or
// memory-mapped) as uint8 CHW, so the loader can assemble any batch without touching the disk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ddp::data {

/// Channels, height and width of every image of a data set.
struct ImageShape {
  int channels = 0;
  int height = 0;
  int width = 0;
  /// Bytes of one uint8 image.
  size_t bytes() const { return size_t(channels) * size_t(height) * size_t(width); }
};

/// Which half of a data set.
enum class Split { kTrain, kTest };

/// "train" or "test".
const char* split_name(Split split);

/// A labelled image data set, read-only once constructed, safe to read from several threads.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of images.
  virtual size_t size() const = 0;
  /// Shape of every image.
  virtual ImageShape shape() const = 0;
  /// Number of classes; every label is below it.
  virtual int num_classes() const = 0;
  /// The uint8 CHW pixels of image `index` (shape().bytes() of them).
  virtual const uint8_t* image(size_t index) const = 0;
  /// The label of image `index`.
  virtual int label(size_t index) const = 0;
  /// Where the data came from, for logs ("CIFAR-10 train, 50000 images from DIR").
  virtual std::string description() const = 0;
};

/// The data sets the library reads, by name (torchvision's data sets of the same names): three
/// binary sets held in memory (open_dataset), and image folders read file by file
/// (image_folder.h, image_pipeline.h).
enum class DatasetKind { kCifar10, kFashionMnist, kMnist, kImageFolder, kTokens };

/// Parses "cifar10", "fashion-mnist", "mnist", "imagefolder" or "tokens" (also "cifar-10",
/// "fashion_mnist", "image-folder"); throws InvalidArgument starting with `what` otherwise.
DatasetKind parse_dataset_kind(const std::string& name, const std::string& what = "data set");

/// The canonical name of a kind ("cifar10", ...).
const char* dataset_kind_name(DatasetKind kind);

/// Opens one split of an in-memory data set from `dir`; throws IoError or DataError naming the
/// file, and InvalidArgument for kImageFolder, which ImageFolder reads.
std::unique_ptr<Dataset> open_dataset(DatasetKind kind, const std::string& dir, Split split);

}  // namespace ddp::data
