// PIL's bilinear resize of 8-bit RGB, bit for bit: Pillow's Image.resize(size, BILINEAR, box)
// (libImaging/Resample.c), which torchvision's Resize and RandomResizedCrop call on PIL images.
// Antialiased when it shrinks (the filter widens with the scale), in 8-bit fixed point, the
// horizontal pass first. Nothing here needs LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ddp::data {

/// PIL's box: left, upper, right, lower, in source pixels (fractions allowed; PIL rounds each to
/// a float, and so does resize_bilinear).
struct Box {
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

/// Resizes `box` of the RGB image `src` (width x height, rows `stride` bytes apart) to
/// out_width x out_height RGB pixels in `out` (rows out_width*3 bytes), exactly as Pillow's
/// Image.resize((out_width, out_height), Image.BILINEAR, box) does. A crop then resize
/// (torchvision's resized_crop: img.crop((j, i, j + w, i + h)).resize(...)) is
/// resize_bilinear(src + i * stride + j * 3, w, h, stride, Box{0, 0, w, h}, ...): the filter
/// then stops at the crop's edges, as PIL's does on the cropped image. `out` must not overlap
/// `src`. Throws InvalidArgument where PIL raises ValueError (sizes under 1, a box outside the
/// image or upside down).
void resize_bilinear(const uint8_t* src, int width, int height, size_t stride, const Box& box,
                     int out_width, int out_height, uint8_t* out);

/// Which copy of resize_bilinear()'s inner loop this CPU runs, for a report: "avx512", "avx2" or
/// "sse2" on x86-64 (the best the CPU has, capped by ATEN_CPU_CAPABILITY as LibTorch's kernels
/// are), "baseline" elsewhere (arm64's baseline has NEON). Every copy computes the same pixels.
const char* resize_bilinear_kernel();

}  // namespace ddp::data
