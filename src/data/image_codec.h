// What image_decode.cpp shares with the per-format decoders (jpeg_decode.cpp, png_decode.cpp):
// their entry points, called once the format is known and the input is not empty, and the checks
// every decoder makes before it allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ddp/data/image.h"

namespace ddp::data::detail {

/// The header of a JPEG / PNG; throws DataError naming `name`.
ImageInfo read_jpeg_info(const uint8_t* data, size_t size, const std::string& name);
ImageInfo read_png_info(const uint8_t* data, size_t size, const std::string& name);

/// The whole image as RGB (see decode_image); `options` already checked.
RgbImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name,
                     const DecodeOptions& options);
RgbImage decode_png(const uint8_t* data, size_t size, const std::string& name,
                    const DecodeOptions& options);

/// Throws DataError unless a `width` x `height` image of format `what` ("JPEG") fits
/// options.max_pixels; returns its size as RGB in bytes (checked for overflow).
size_t checked_rgb_bytes(int64_t width, int64_t height, const char* what, const std::string& name,
                         const DecodeOptions& options);

}  // namespace ddp::data::detail
