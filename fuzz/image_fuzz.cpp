// libFuzzer target for the image decoders and the resize: the input is a JPEG or PNG file
// (whichever its magic says), read for its header and decoded, a JPEG at a scale its last byte
// picks; a decoded image is then resized, a box and size drawn from its first bytes. Every outcome
// must be a ddp::Error or an image of the header's size: no crash, no hang, and no allocation
// past ~64 MB (the pixel limit bounds libjpeg's coefficient buffers: at most 4 components of
// 4x4-sampled blocks, padded, 256 bytes a pixel).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ddp/data/image.h"
#include "ddp/data/resample.h"
#include "ddp/error.h"

namespace {

constexpr int64_t kMaxPixels = int64_t(1) << 18;

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "image_fuzz: %s\n", what);
    std::abort();
  }
}

// A box inside the image and an output size of at most 64 x 64, from the input's bytes 4..11.
void resize(const ddp::data::RgbImage& image, const uint8_t* data, size_t size) {
  uint8_t b[8] = {};
  for (size_t i = 0; i < 8 && i + 4 < size; ++i) b[i] = data[i + 4];
  const double w = image.width, h = image.height;
  const double x0 = w * b[0] / 256, y0 = h * b[1] / 256;
  const ddp::data::Box box{x0, y0, x0 + (w - x0) * b[2] / 255, y0 + (h - y0) * b[3] / 255};
  const int out_width = 1 + (b[4] | b[5] << 8) % 64, out_height = 1 + (b[6] | b[7] << 8) % 64;
  std::vector<uint8_t> out(size_t(out_width) * out_height * 3);
  ddp::data::resize_bilinear(image.pixels.data(), image.width, image.height,
                             size_t(image.width) * 3, box, out_width, out_height, out.data());
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
    resize(image, data, size);
  } catch (const ddp::Error&) {
    // Truncated, corrupt, too large: the expected outcome for almost every input.
  }
  return 0;
}
