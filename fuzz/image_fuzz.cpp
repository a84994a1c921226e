// libFuzzer target for the image decoders: the input is a JPEG or PNG file (whichever its magic
// says), read for its header and decoded; a JPEG at a scale its last byte picks. Every outcome
// must be a ddp::Error or an image of the header's size: no crash, no hang, and no allocation
// past ~64 MB (the pixel limit bounds libjpeg's coefficient buffers: at most 4 components of
// 4x4-sampled blocks, padded, 256 bytes a pixel).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "ddp/data/image.h"
#include "ddp/error.h"

namespace {

constexpr int64_t kMaxPixels = int64_t(1) << 18;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "image_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddp::data;
  DecodeOptions options;
  options.max_pixels = kMaxPixels;
  options.scale_denominator = size > 0 ? 1 << (data[size - 1] % 4) : 1;
  ImageInfo info;
  try {
    info = read_image_info(data, size, "fuzz");
    require(info.format == sniff_image_format(data, size), "header format differs from sniffed");
  } catch (const ddp::Error&) {
    return 0;  // decode_image must refuse it too, but may say why differently
  }
  try {
    const RgbImage image = decode_image(data, size, "fuzz", options);
    const int d = info.format == ImageFormat::kJpeg ? options.scale_denominator : 1;
    require(image.width == scaled_size(info.width, d), "width differs from the header's");
    require(image.height == scaled_size(info.height, d), "height differs from the header's");
    require(image.pixels.size() == size_t(image.width) * image.height * 3, "pixel buffer size");
    volatile uint32_t sum = 0;
    for (size_t i = 0; i < image.pixels.size(); i += 61) sum += image.pixels[i];
    sum += image.pixels.back();
  } catch (const ddp::Error&) {
    // Truncated, corrupt, too large: the expected outcome for almost every input.
  }
  return 0;
}
