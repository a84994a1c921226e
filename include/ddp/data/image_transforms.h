// torchvision's geometric transforms as crop boxes and sizes, with its exact arithmetic (Python's
// round-half-to-even included), and the counter-based generator their random choices come from:
// the draws for a sample are a function of (seed, epoch, sample index) alone, so a batch is the
// same whatever thread makes it, and a run resumed mid-epoch draws what it would have drawn.
#pragma once

#include <array>
#include <cstdint>

namespace ddp::data {

/// Philox4x32-10 (Salmon et al., SC'11): random numbers computed from a key and a counter, with
/// no state carried between samples. Stream (seed; epoch, index) yields draw 0, 1, 2, ...
class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t epoch, uint64_t index);
  /// The next 32 random bits.
  uint32_t next_u32();
  /// Uniform in [low, high), with 53 random bits.
  double uniform(double low, double high);
  /// Uniform integer in [low, high] (high >= low).
  int64_t integer(int64_t low, int64_t high);

 private:
  std::array<uint32_t, 2> key_;
  std::array<uint32_t, 4> counter_;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;  // of block_
};

/// A rectangle of an image in pixels, as torchvision's (i, j, h, w).
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

/// RandomResizedCrop.get_params: up to 10 draws of an area in `scale` and a log-uniform aspect
/// ratio in `ratio`, then torchvision's central fallback.
struct RandomResizedCropParams {
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
};
CropBox random_resized_crop_box(int width, int height, const RandomResizedCropParams& params,
                                CounterRng& rng);

/// Resize(size) with an int size: the shorter side becomes `size`, the longer one scaled and
/// truncated, as torchvision's _compute_resized_output_size. Returns {width, height}.
std::array<int, 2> resize_shorter_side(int width, int height, int size);

/// CenterCrop(size) of a width x height image at least that large: torchvision's offsets.
CropBox center_crop_box(int width, int height, int size);

/// Python's round(): to the nearest integer, halves to the even one.
int64_t round_half_even(double x);

}  // namespace ddp::data
