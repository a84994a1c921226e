// Format sniffing and the checks common to every format; the decoders themselves are in
// jpeg_decode.cpp and png_decode.cpp.
#include <cstdio>
#include <limits>

#include <c10/util/StringUtil.h>

#include "data/image_codec.h"
#include "ddp/data/image.h"
#include "ddp/error.h"

namespace ddp::data {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

// The first bytes of a file that is neither format, for the message: "25 50 44 46 ('%PDF')".
std::string describe_start(const uint8_t* data, size_t size) {
  const size_t n = size < 8 ? size : 8;
  std::string hex;
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    char byte[4];
    std::snprintf(byte, sizeof byte, "%s%02x", i ? " " : "", data[i]);
    hex += byte;
    text += data[i] >= 0x20 && data[i] < 0x7f ? char(data[i]) : '.';
  }
  return c10::str(hex, " ('", text, "')");
}

// Throws unless `data` holds something decode_image and read_image_info know.
ImageFormat require_format(const uint8_t* data, size_t size, const std::string& name) {
  if (size == 0) throw DataError(c10::str(name, ": empty file (0 bytes), not an image"));
  const ImageFormat format = sniff_image_format(data, size);
  if (format == ImageFormat::kUnknown) {
    throw DataError(c10::str(name, ": not a JPEG or PNG image (", size, " bytes, starting with ",
                             describe_start(data, size), ")"));
  }
  return format;
}

}  // namespace

ImageFormat sniff_image_format(const uint8_t* data, size_t size) {
  if (data == nullptr) return ImageFormat::kUnknown;
  // SOI followed by the start of any marker: what PIL's JPEG plugin accepts too.
  if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff) {
    return ImageFormat::kJpeg;
  }
  if (size >= sizeof kPngSignature) {
    bool png = true;
    for (size_t i = 0; i < sizeof kPngSignature; ++i) png = png && data[i] == kPngSignature[i];
    if (png) return ImageFormat::kPng;
  }
  return ImageFormat::kUnknown;
}

ImageInfo read_image_info(const uint8_t* data, size_t size, const std::string& name) {
  if (require_format(data, size, name) == ImageFormat::kJpeg) {
    return detail::read_jpeg_info(data, size, name);
  }
  return detail::read_png_info(data, size, name);
}

RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name,
                      const DecodeOptions& options) {
  const int d = options.scale_denominator;
  if (d != 1 && d != 2 && d != 4 && d != 8) {
    throw InvalidArgument(c10::str("DecodeOptions::scale_denominator is ", d,
                                   "; it takes 1, 2, 4 or 8 (decoding ", name, ")"));
  }
  if (options.max_pixels < 1) {
    throw InvalidArgument(
        c10::str("DecodeOptions::max_pixels is ", options.max_pixels, "; it must be at least 1"));
  }
  if (require_format(data, size, name) == ImageFormat::kJpeg) {
    return detail::decode_jpeg(data, size, name, options);
  }
  return detail::decode_png(data, size, name, options);
}

int scaled_size(int size, int denominator) {
  if (denominator < 1) {
    throw InvalidArgument(c10::str("scaled_size: denominator ", denominator, " is not positive"));
  }
  return int((int64_t(size) + denominator - 1) / denominator);
}

namespace detail {

size_t checked_rgb_bytes(int64_t width, int64_t height, const char* what, const std::string& name,
                         const DecodeOptions& options) {
  if (width < 1 || height < 1) {
    throw DataError(c10::str(name, ": ", what, " header says ", width, " x ", height,
                             " pixels; the file is corrupt"));
  }
  // Both sides fit 31 bits (the formats' limits), so their product fits int64_t.
  const int64_t pixels = width * height;
  if (pixels > options.max_pixels) {
    throw DataError(c10::str(name, ": ", what, " of ", width, " x ", height, " = ", pixels,
                             " pixels, more than the limit of ", options.max_pixels,
                             " (DecodeOptions::max_pixels, PIL's decompression bomb limit)"));
  }
  if (uint64_t(pixels) > std::numeric_limits<size_t>::max() / 4) {
    throw DataError(c10::str(name, ": ", what, " of ", width, " x ", height,
                             " pixels is too large for this machine's memory"));
  }
  return size_t(pixels) * 3;
}

}  // namespace detail
}  // namespace ddp::data
