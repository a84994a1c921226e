#include "ddp/data/cifar10.h"

#include <sys/stat.h>

#include <algorithm>

#include <c10/util/StringUtil.h>

#include "data/mapped_file.h"
#include "ddp/error.h"

namespace ddp::data {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::vector<std::string> Cifar10Dataset::file_names(Split split) {
  if (split == Split::kTest) return {"test_batch.bin"};
  return {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
          "data_batch_5.bin"};
}

std::string Cifar10Dataset::resolve_dir(const std::string& dir, Split split) {
  const std::string first = file_names(split).front();
  if (is_file(dir + "/" + first)) return dir;
  const std::string nested = dir + "/cifar-10-batches-bin";
  if (is_file(nested + "/" + first)) return nested;
  throw IoError(c10::str("CIFAR-10 not found: neither ", dir, "/", first, " nor ", nested, "/",
                         first,
                         " exists; point the data directory at cifar-10-batches-bin (or its "
                         "parent), download it first (ddp::data::download_cifar10), or write a "
                         "synthetic set (ddp::data::write_synthetic_cifar10)"));
}

Cifar10Dataset::Cifar10Dataset(const std::string& dir, Split split) {
  const std::string root = resolve_dir(dir, split);
  for (const std::string& name : file_names(split)) {
    auto file = std::make_unique<MappedFile>(root + "/" + name);
    if (file->size() == 0 || file->size() % kCifarRecordBytes != 0) {
      throw DataError(c10::str(file->path(), ": size ", file->size(),
                               " bytes is not a positive multiple of the CIFAR-10 record size ",
                               kCifarRecordBytes,
                               "; the file is truncated or not CIFAR-10 binary"));
    }
    const size_t records = file->size() / kCifarRecordBytes;
    for (size_t r = 0; r < records; ++r) {
      const uint8_t label = file->data()[r * kCifarRecordBytes];
      if (label >= 10) {
        throw DataError(c10::str(file->path(), ": record ", r, " has label ", int(label),
                                 ", but CIFAR-10 labels are 0-9; the file is corrupt"));
      }
    }
    first_index_.push_back(size_);
    size_ += records;
    files_.push_back(std::move(file));
  }
  description_ = c10::str("CIFAR-10 ", split_name(split), ", ", size_, " images from ", root);
}

Cifar10Dataset::~Cifar10Dataset() = default;

const uint8_t* Cifar10Dataset::record(size_t index) const {
  // Files are few (5), so a linear search from the back is cheapest.
  size_t f = files_.size() - 1;
  while (first_index_[f] > index) --f;
  return files_[f]->data() + (index - first_index_[f]) * kCifarRecordBytes;
}

}  // namespace ddp::data
