#include "ddp/data/image_transforms.h"

#include <algorithm>
#include <cmath>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::data {
namespace {

// Philox4x32's constants (Random123).
constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;

std::array<uint32_t, 4> philox(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(kMultiplier0) * c[0];
    const uint64_t p1 = uint64_t(kMultiplier1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1],
         uint32_t(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

}  // namespace

CounterRng::CounterRng(uint64_t seed, uint64_t epoch, uint64_t index)
    : key_{uint32_t(seed), uint32_t(seed >> 32)},
      counter_{0, uint32_t(epoch), uint32_t(index), uint32_t(index >> 32)} {}

uint32_t CounterRng::next_u32() {
  if (used_ == 4) {
    block_ = philox(counter_, key_);
    ++counter_[0];  // 2^32 blocks per sample: more than any transform draws
    used_ = 0;
  }
  return block_[size_t(used_++)];
}

double CounterRng::uniform(double low, double high) {
  const uint64_t first = next_u32(), second = next_u32();  // in this order (the comma sequences)
  const uint64_t bits = (first << 21) ^ (second >> 11);
  return low + (high - low) * (double(bits) * 0x1.0p-53);
}

int64_t CounterRng::integer(int64_t low, int64_t high) {
  const uint64_t range = uint64_t(high - low) + 1;
  const uint64_t first = next_u32(), second = next_u32();
  const uint64_t bits = (first << 32) | second;
  return low + int64_t(bits % range);  // bias below 2^-32 for any image size
}

int64_t round_half_even(double x) { return int64_t(std::nearbyint(x)); }

CropBox random_resized_crop_box(int width, int height, const RandomResizedCropParams& params,
                                CounterRng& rng) {
  const double area = double(width) * double(height);
  const double log_min = std::log(params.ratio_min), log_max = std::log(params.ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * rng.uniform(params.scale_min, params.scale_max);
    const double aspect = std::exp(rng.uniform(log_min, log_max));
    const int w = int(round_half_even(std::sqrt(target_area * aspect)));
    const int h = int(round_half_even(std::sqrt(target_area / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const int top = int(rng.integer(0, height - h));
      const int left = int(rng.integer(0, width - w));
      return {top, left, h, w};
    }
  }
  const double in_ratio = double(width) / double(height);
  int w = width, h = height;
  if (in_ratio < std::min(params.ratio_min, params.ratio_max)) {
    h = int(round_half_even(w / std::min(params.ratio_min, params.ratio_max)));
  } else if (in_ratio > std::max(params.ratio_min, params.ratio_max)) {
    w = int(round_half_even(h * std::max(params.ratio_min, params.ratio_max)));
  }
  return {(height - h) / 2, (width - w) / 2, h, w};
}

std::array<int, 2> resize_shorter_side(int width, int height, int size) {
  const bool portrait = width <= height;
  const int short_side = portrait ? width : height, long_side = portrait ? height : width;
  // Python's int(): truncation. A very thin image's long side can pass int's range.
  const int64_t new_long = int64_t(size) * long_side / short_side;
  if (new_long > (int64_t(1) << 30)) {
    throw DataError(c10::str("a ", width, "x", height, " image resized to ", size,
                             " on its shorter side would be ", new_long, " pixels long"));
  }
  return portrait ? std::array<int, 2>{size, int(new_long)}
                  : std::array<int, 2>{int(new_long), size};
}

CropBox center_crop_box(int width, int height, int size) {
  if (width < size || height < size) {
    throw InvalidArgument(c10::str("center crop ", size, " of a ", width, "x", height, " image"));
  }
  return {int(round_half_even((height - size) / 2.0)), int(round_half_even((width - size) / 2.0)),
          size, size};
}

}  // namespace ddp::data
