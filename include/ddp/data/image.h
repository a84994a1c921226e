// JPEG and PNG files decoded to 8-bit RGB the way torchvision's ImageFolder sees them: PIL's
// Image.open(...).convert("RGB"), pixel for pixel. JPEG goes through libjpeg-turbo's TurboJPEG
// (DDP_WITH_JPEG), PNG through libspng (DDP_WITH_PNG); a build without one says so when asked to
// decode such a file. Nothing here needs LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::data {

/// What a file holds, told by its first bytes (never by its name).
enum class ImageFormat { kUnknown, kJpeg, kPng };

/// The format of `data` by its magic bytes; kUnknown for anything else (or too few bytes).
ImageFormat sniff_image_format(const uint8_t* data, size_t size);

/// What a file's header says.
struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0;
  int height = 0;
};

/// 8-bit RGB, rows of width*3 bytes, no padding.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

/// How decode_image works.
struct DecodeOptions {
  /// Larger images are refused before anything is decoded: PIL's Image.MAX_IMAGE_PIXELS, its
  /// decompression bomb limit (PIL only warns up to twice this; here it is a hard limit).
  int64_t max_pixels = 89478485;
  /// 1, 2, 4 or 8: a JPEG is decoded at 1/N of its size in the DCT domain, scaled_size() pixels
  /// a side (much faster, and not what PIL gives). PNG ignores it.
  int scale_denominator = 1;
};

/// The format and size from the header alone (cheap). Throws DataError starting with `name`
/// (a path, for messages) on an empty file, an unknown format or a broken header.
ImageInfo read_image_info(const uint8_t* data, size_t size, const std::string& name);

/// The whole image as RGB, converted as PIL's Image.convert("RGB") does: grayscale replicated,
/// alpha dropped (not composited), palettes looked up, 16-bit gray clipped to 255, other 16-bit
/// samples' high byte, Adobe CMYK inverted then PIL's CMYK formula; no EXIF rotation. Throws
/// DataError naming `name` and what is wrong: empty, not an image, truncated, corrupt, more
/// pixels than options.max_pixels, or a decoder this build lacks. A bad scale_denominator is an
/// InvalidArgument.
RgbImage decode_image(const uint8_t* data, size_t size, const std::string& name,
                      const DecodeOptions& options = {});

/// The size a JPEG side of `size` pixels has when decoded at 1/`denominator` (TurboJPEG's
/// TJSCALED: rounded up).
int scaled_size(int size, int denominator);

/// Whether this build decodes JPEG (DDP_WITH_JPEG: libjpeg-turbo's TurboJPEG).
bool jpeg_decoding_available();
/// Whether this build decodes PNG (DDP_WITH_PNG: libspng).
bool png_decoding_available();

}  // namespace ddp::data
