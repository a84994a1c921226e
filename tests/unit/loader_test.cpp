// The prefetching loader: batches in index order, last partial batch kept, the same batches as
// made directly, errors surfaced.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "ddp/data/cifar10.h"
#include "ddp/data/loader.h"
#include "ddp/data/synthetic.h"
#include "ddp/error.h"
#include "support/process.h"

namespace ddp::data {
namespace {

TEST(Loader, BatchesFollowTheIndicesAndKeepTheLastPartialBatch) {
  test::TempDir dir;
  write_synthetic_cifar10(dir.path(), SyntheticOptions(50, 5).seed(1));
  Cifar10Dataset data(dir.path(), Split::kTrain);
  LoaderOptions options;
  options.batch_size(8);
  options.prefetch(2);
  Loader loader(data, options);
  std::vector<int64_t> indices;
  for (int64_t i = 49; i >= 0; i -= 2) indices.push_back(i);  // 25 indices
  loader.start_epoch(indices, 0);
  EXPECT_EQ(loader.num_batches(), 4);
  std::vector<int64_t> sizes;
  size_t pos = 0;
  while (auto batch = loader.next()) {
    sizes.push_back(batch->labels.size(0));
    for (int64_t j = 0; j < batch->labels.size(0); ++j, ++pos) {
      ASSERT_EQ(batch->labels[j].item<int64_t>(), data.label(size_t(indices[pos])));
      const torch::Tensor expected =
          torch::from_blob(const_cast<uint8_t*>(data.image(size_t(indices[pos]))), {3, 32, 32},
                           torch::kUInt8)
              .to(torch::kFloat32)
              .div(255);
      ASSERT_TRUE(torch::equal(batch->images[j], expected));
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{8, 8, 8, 1}));
}

TEST(Loader, DropLastAndSkipAndRestart) {
  test::TempDir dir;
  write_synthetic_cifar10(dir.path(), SyntheticOptions(50, 5).seed(1));
  Cifar10Dataset data(dir.path(), Split::kTrain);
  LoaderOptions options;
  options.batch_size(16);
  options.drop_last(true);
  Loader loader(data, options);
  std::vector<int64_t> indices(50);
  for (int64_t i = 0; i < 50; ++i) indices[size_t(i)] = i;
  loader.start_epoch(indices, 0, /*skip_batches=*/1);
  int count = 0;
  while (auto batch = loader.next()) {
    EXPECT_EQ(batch->index, count + 1);
    ++count;
  }
  EXPECT_EQ(count, 2);
  loader.start_epoch(indices, 1);  // a new epoch while nothing is pending
  EXPECT_TRUE(loader.next().has_value());
  loader.start_epoch(indices, 2);  // and while batches are pending
  EXPECT_EQ(loader.next()->index, 0);
}

TEST(Loader, RejectsIndicesOutsideTheDataSet) {
  test::TempDir dir;
  write_synthetic_cifar10(dir.path(), SyntheticOptions(10, 5).seed(1));
  Cifar10Dataset data(dir.path(), Split::kTrain);
  Loader loader(data, {});
  EXPECT_THROW(loader.start_epoch({0, 10}, 0), InvalidArgument);
}

}  // namespace
}  // namespace ddp::data
