#include "ddp/data/dataset.h"

#include <c10/util/StringUtil.h>

#include "ddp/data/cifar10.h"
#include "ddp/data/idx.h"
#include "ddp/error.h"

namespace ddp::data {

const char* split_name(Split split) { return split == Split::kTrain ? "train" : "test"; }

DatasetKind parse_dataset_kind(const std::string& name, const std::string& what) {
  if (name == "cifar10" || name == "cifar-10") return DatasetKind::kCifar10;
  if (name == "fashion-mnist" || name == "fashion_mnist") return DatasetKind::kFashionMnist;
  if (name == "mnist") return DatasetKind::kMnist;
  if (name == "imagefolder" || name == "image-folder") return DatasetKind::kImageFolder;
  if (name == "tokens") return DatasetKind::kTokens;
  throw InvalidArgument(c10::str(what, ": unknown data set '", name,
                                 "'; use cifar10, fashion-mnist, mnist, imagefolder or tokens"));
}

const char* dataset_kind_name(DatasetKind kind) {
  switch (kind) {
    case DatasetKind::kCifar10:
      return "cifar10";
    case DatasetKind::kFashionMnist:
      return "fashion-mnist";
    case DatasetKind::kMnist:
      return "mnist";
    case DatasetKind::kImageFolder:
      return "imagefolder";
    case DatasetKind::kTokens:
      return "tokens";
  }
  return "?";
}

std::unique_ptr<Dataset> open_dataset(DatasetKind kind, const std::string& dir, Split split) {
  switch (kind) {
    case DatasetKind::kCifar10:
      return std::make_unique<Cifar10Dataset>(dir, split);
    case DatasetKind::kFashionMnist:
      return std::make_unique<IdxDataset>(dir, split, "Fashion-MNIST");
    case DatasetKind::kMnist:
      return std::make_unique<IdxDataset>(dir, split, "MNIST");
    case DatasetKind::kTokens:
      throw InvalidArgument(c10::str("token data set ", dir,
                                     ": tokens are read as windows (ddp::data::TokenDataset)"));
    case DatasetKind::kImageFolder:
      break;
  }
  if (kind == DatasetKind::kImageFolder) {
    throw InvalidArgument(
        c10::str("image folder ", dir,
                 ": image folders are read file by file (ddp::data::ImageFolder), "
                 "not held in memory"));
  }
  throw InvalidArgument("unknown data set kind");
}

}  // namespace ddp::data
