// An image folder with torchvision's ImageFolder semantics: ROOT/<class>/**/<image>, the classes
// the sorted names of ROOT's sub-directories (label = position), the samples of each class in
// the order of sorted(os.walk(class dir, followlinks=True)) with each directory's file names
// sorted, the files chosen by torchvision's extensions (case-insensitive). Only the index is held
// (paths and labels, about path length + 12 bytes a sample); the pixels are read when asked for.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::data {

/// torchvision's IMG_EXTENSIONS, lower case: the files an ImageFolder takes.
const std::vector<std::string>& image_folder_extensions();

class ImageFolder {
 public:
  /// Indexes `root`. Throws IoError when it is not a readable directory, DataError when it has no
  /// class folder, when a class has no image (naming them) or when an image's format is one
  /// ddp.cpp does not decode (naming the first such file): at construction, never mid-epoch.
  explicit ImageFolder(const std::string& root);

  const std::string& root() const { return root_; }
  /// Class names, sorted; a label is an index into it.
  const std::vector<std::string>& classes() const { return classes_; }
  size_t size() const { return labels_.size(); }
  /// The full path of sample `index` (ROOT/class/...).
  std::string path(size_t index) const;
  int label(size_t index) const { return labels_[index]; }
  /// Bytes the index holds (the paths, their offsets and the labels).
  size_t index_bytes() const;
  /// "ImageFolder ROOT: 1000 images of 10 classes".
  std::string description() const;

 private:
  void add_class(int label);

  std::string root_;
  std::vector<std::string> classes_;
  std::string paths_;              // every sample's path below root, one after another
  std::vector<uint64_t> offsets_;  // sample i's path is paths_[offsets_[i], offsets_[i + 1])
  std::vector<int32_t> labels_;
};

}  // namespace ddp::data
