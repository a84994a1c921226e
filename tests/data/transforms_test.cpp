// Transforms: the default is exactly ToTensor(); the random ones are reproducible and correct.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "ddp/data/cifar10.h"
#include "ddp/data/synthetic.h"
#include "ddp/data/transforms.h"
#include "support/process.h"

namespace ddp::data {
namespace {

class TransformsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    write_synthetic_cifar10(dir_.path(), SyntheticOptions(10, 5).seed(4));
    data_ = std::make_unique<Cifar10Dataset>(dir_.path(), Split::kTest);
  }
  torch::Tensor raw(size_t i) {
    return torch::from_blob(const_cast<uint8_t*>(data_->image(i)), {3, 32, 32}, torch::kUInt8)
        .clone();
  }
  torch::Tensor apply(const TransformOptions& t, size_t i, int64_t epoch = 0) {
    torch::Tensor out = torch::empty({3, 32, 32});
    transform_image(*data_, i, t, epoch, out.data_ptr<float>());
    return out;
  }
  test::TempDir dir_;
  std::unique_ptr<Cifar10Dataset> data_;
};

TEST_F(TransformsTest, DefaultIsToTensorExactly) {
  // ToTensor: uint8 → float32, then divided by 255 (a division, bit for bit).
  const torch::Tensor expected = raw(2).to(torch::kFloat32).div(255);
  EXPECT_TRUE(torch::equal(apply({}, 2), expected));
}

TEST_F(TransformsTest, NormalizeMatchesToTensorThenNormalize) {
  TransformOptions t;
  t.normalize(true);
  default_normalization(DatasetKind::kCifar10, t.mean(), t.std());
  const torch::Tensor mean = torch::tensor(t.mean()).view({3, 1, 1});
  const torch::Tensor std = torch::tensor(t.std()).view({3, 1, 1});
  const torch::Tensor expected = (raw(1).to(torch::kFloat32) / 255 - mean) / std;
  EXPECT_TRUE(torch::allclose(apply(t, 1), expected, 1e-5, 1e-5));
}

TEST_F(TransformsTest, CropAndFlipAreReproducibleAndAreCropsAndFlips) {
  TransformOptions t;
  t.crop_padding(4);
  t.horizontal_flip(true);
  t.seed(9);
  EXPECT_TRUE(torch::equal(apply(t, 3, 7), apply(t, 3, 7)));
  // Each result equals some shift of the zero-padded image, flipped or not.
  const torch::Tensor padded =
      torch::constant_pad_nd(raw(3).to(torch::kFloat32) / 255, {4, 4, 4, 4});
  int distinct = 0;
  torch::Tensor first;
  for (int64_t epoch = 0; epoch < 8; ++epoch) {
    const torch::Tensor out = apply(t, 3, epoch);
    bool found = false;
    for (int dy = 0; dy <= 8 && !found; ++dy) {
      for (int dx = 0; dx <= 8 && !found; ++dx) {
        const torch::Tensor crop = padded.slice(1, dy, dy + 32).slice(2, dx, dx + 32);
        found = torch::equal(out, crop) || torch::equal(out, crop.flip({2}));
      }
    }
    EXPECT_TRUE(found) << "epoch " << epoch;
    if (epoch == 0)
      first = out;
    else
      distinct += !torch::equal(out, first);
  }
  EXPECT_GT(distinct, 0) << "the random choice never changed";
}

}  // namespace
}  // namespace ddp::data
