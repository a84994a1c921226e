#include "ddp/data/transforms.h"

#include <random>

#include "data/splitmix.h"
#include "ddp/data/image_pipeline.h"
#include "ddp/error.h"

namespace ddp::data {

void default_normalization(DatasetKind kind, std::vector<float>& mean, std::vector<float>& std) {
  switch (kind) {
    case DatasetKind::kCifar10:
      mean = {0.4914f, 0.4822f, 0.4465f};
      std = {0.2470f, 0.2435f, 0.2616f};
      return;
    case DatasetKind::kFashionMnist:
      mean = {0.2860f};
      std = {0.3530f};
      return;
    case DatasetKind::kMnist:
      mean = {0.1307f};
      std = {0.3081f};
      return;
    case DatasetKind::kImageFolder:  // ImageNet's, as torchvision's examples use for any folder
      mean = kImageNetMean;
      std = kImageNetStd;
      return;
    case DatasetKind::kTokens:
      throw InvalidArgument("token data sets have no image normalisation");
  }
}

void transform_image(const Dataset& dataset, size_t index, const TransformOptions& options,
                     int64_t epoch, float* out) {
  const ImageShape shape = dataset.shape();
  const uint8_t* in = dataset.image(index);
  const int pad = options.crop_padding();
  int dy = 0, dx = 0;
  bool flip = false;
  if (pad > 0 || options.horizontal_flip()) {
    // One generator per image and epoch. Keyed on the image, not on its place in a batch: the
    // ranks' batches hold different images at the same place, and must not share their draws.
    std::mt19937_64 rng(
        splitmix64(options.seed() ^ splitmix64(uint64_t(epoch) ^ splitmix64(uint64_t(index)))));
    if (pad > 0) {
      dy = int(rng() % uint64_t(2 * pad + 1)) - pad;
      dx = int(rng() % uint64_t(2 * pad + 1)) - pad;
    }
    flip = options.horizontal_flip() && (rng() & 1);
  }
  const int H = shape.height, W = shape.width;
  for (int c = 0; c < shape.channels; ++c) {
    // Exactly torchvision: ToTensor divides by 255, Normalize then subtracts and divides.
    const bool norm = options.normalize();
    const float mean = norm ? options.mean()[size_t(c)] : 0.0f;
    const float std = norm ? options.std()[size_t(c)] : 1.0f;
    auto convert = [&](float pixel) {
      const float x = pixel / 255.0f;
      return norm ? (x - mean) / std : x;
    };
    const uint8_t* plane = in + size_t(c) * H * W;
    float* dst = out + size_t(c) * H * W;
    if (pad == 0 && !flip) {
      for (int i = 0; i < H * W; ++i) dst[i] = convert(float(plane[i]));
      continue;
    }
    for (int y = 0; y < H; ++y) {
      const int sy = y + dy;
      for (int x = 0; x < W; ++x) {
        const int ox = flip ? W - 1 - x : x;
        const int sx = ox + dx;
        const bool inside = sy >= 0 && sy < H && sx >= 0 && sx < W;
        // Padding is zero in pixel space, as torchvision pads before ToTensor/Normalize.
        dst[y * W + x] = convert(inside ? float(plane[sy * W + sx]) : 0.0f);
      }
    }
  }
}

}  // namespace ddp::data
