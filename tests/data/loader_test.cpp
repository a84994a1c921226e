// The prefetching loader: batches in index order, last partial batch kept, the same batches as
// made directly, an image's random crop and flip its own, errors surfaced (a batch that
// cannot be allocated, a sample of another shape or type than its source says).
#include <gtest/gtest.h>

#include <map>

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

// The random crop and flip belong to (seed, epoch, image), not to a place in a batch: two ranks'
// batches hold different images at the same places and must not share their draws, and a run at
// another world size, batch size or thread count augments each image the same way.
TEST(Loader, AnImagesCropAndFlipDoNotDependOnItsPlace) {
  test::TempDir dir;
  write_synthetic_cifar10(dir.path(), SyntheticOptions(40, 5).seed(1));
  Cifar10Dataset data(dir.path(), Split::kTrain);
  TransformOptions augment;
  augment.crop_padding(4).horizontal_flip(true).seed(3);
  auto rows_by_image = [&](std::vector<int64_t> indices, int64_t batch_size, int threads) {
    Loader loader(data,
                  LoaderOptions().batch_size(batch_size).threads(threads).transforms(augment));
    loader.start_epoch(indices, 1);
    std::map<int64_t, torch::Tensor> rows;
    size_t pos = 0;
    while (auto batch = loader.next()) {
      for (int64_t j = 0; j < batch->images.size(0); ++j) rows[indices[pos++]] = batch->images[j];
    }
    return rows;
  };
  std::vector<int64_t> rank0, rank1;  // DistributedSampler's split of 0..39 without shuffling
  for (int64_t i = 0; i < 40; i += 2) rank0.push_back(i), rank1.push_back(i + 1);
  const auto a = rows_by_image(rank0, 4, 1);
  const auto b = rows_by_image({rank0.rbegin(), rank0.rend()}, 7, 2);
  for (const auto& [image, row] : a) EXPECT_TRUE(torch::equal(row, b.at(image))) << image;
  // At the same places in the two ranks' batches, the draws differ: some row's crop or flip is
  // not what the other rank's image at that place got (same shift and flip would leave a border
  // of zeros, or its absence, at the same columns in both).
  const auto c = rows_by_image(rank1, 4, 1);
  int same_zero_pattern = 0;
  for (size_t k = 0; k < rank0.size(); ++k) {
    const torch::Tensor zeros0 = a.at(rank0[k]).eq(0).all(0);
    const torch::Tensor zeros1 = c.at(rank1[k]).eq(0).all(0);
    same_zero_pattern += torch::equal(zeros0, zeros1);
  }
  EXPECT_LT(same_zero_pattern, int(rank0.size())) << "every place drew the same crop on both ranks";
}

// A source that says its samples' shape: the loader allocates whole batches from it.
class ShapedSource : public SampleSource {
 public:
  ShapedSource(std::vector<int64_t> declared, std::vector<int64_t> returned,
               torch::ScalarType type = torch::kFloat32)
      : declared_(std::move(declared)), returned_(std::move(returned)), type_(type) {}
  size_t size() const override { return 8; }
  std::vector<int64_t> data_shape() const override { return declared_; }
  Example get(const SampleContext& c) const override {
    return {torch::full(returned_, c.index, type_), torch::scalar_tensor(c.index)};
  }

 private:
  std::vector<int64_t> declared_, returned_;
  torch::ScalarType type_;
};

// next() throws what went wrong; the error must contain `words`.
void expect_next_throws(Loader& loader, const std::string& words) {
  loader.start_epoch({0, 1, 2, 3, 4, 5, 6, 7}, 0);
  try {
    loader.next();
    ADD_FAILURE() << "no error; expected one saying " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(Loader, ABatchThatCannotBeMadeFailsNextNotTheProcess) {
  const auto options = LoaderOptions().batch_size(4).threads(2);
  using Shape = std::vector<int64_t>;
  // 2^52 floats a row: no machine has it, so the batch's allocation throws in a loader thread.
  // (AddressSanitizer aborts on such a request instead of letting the allocator fail.)
#if !defined(__SANITIZE_ADDRESS__)
  Loader huge(std::make_shared<ShapedSource>(Shape{1 << 26, 1 << 26}, Shape{1}), options);
  expect_next_throws(huge, "cannot allocate a batch of [4, 67108864, 67108864]");
#endif
  // A sample that is not what data_shape() says is refused, not broadcast or cast.
  Loader wrong_shape(std::make_shared<ShapedSource>(Shape{3, 2, 2}, Shape{1, 2, 2}), options);
  expect_next_throws(wrong_shape,
                     "has data [1, 2, 2] Float where its source's data_shape() says "
                     "[3, 2, 2] Float");
  Loader wrong_type(std::make_shared<ShapedSource>(Shape{3, 2, 2}, Shape{3, 2, 2}, torch::kUInt8),
                    options);
  expect_next_throws(wrong_type, "has data [3, 2, 2] Byte where");
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
