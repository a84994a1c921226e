// PNG through libspng, giving the pixels PIL's PngImagePlugin + convert("RGB") gives: every colour
// type and bit depth, interlaced or not; no gamma, sBIT or tRNS applied (PIL applies none of them
// to RGB). Without libspng (DDP_WITH_PNG=OFF) a PNG is refused by name.
#include "ddp_build_config.h"

#if defined(DDP_HAVE_PNG)
#include <spng.h>
#endif

#include <cstring>
#include <memory>

#include <c10/util/StringUtil.h>

#include "data/image_codec.h"
#include "ddp/data/image.h"
#include "ddp/error.h"

namespace ddp::data {

#if !defined(DDP_HAVE_PNG)

bool png_decoding_available() { return false; }

namespace detail {
namespace {

[[noreturn]] void no_png(const std::string& name) {
  throw DataError(c10::str(name,
                           ": a PNG image, and this build has no PNG decoder (DDP_WITH_PNG=OFF, or "
                           "libspng was not found): install libspng-dev (Debian) and configure "
                           "again"));
}

}  // namespace

ImageInfo read_png_info(const uint8_t*, size_t, const std::string& name) { no_png(name); }

RgbImage decode_png(const uint8_t*, size_t, const std::string& name, const DecodeOptions&) {
  no_png(name);
}

}  // namespace detail

#else

bool png_decoding_available() { return true; }

namespace detail {
namespace {

// What one ancillary chunk (an ICC profile, compressed text) may take once decompressed, and all
// of them together: a forged PNG cannot make the decoder allocate more. PIL's own limit on text
// chunks is 1 MiB each (PngImagePlugin.MAX_TEXT_CHUNK).
constexpr size_t kMaxChunkBytes = size_t(16) << 20;
constexpr size_t kMaxChunkCacheBytes = size_t(64) << 20;

struct SpngFree {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};
using SpngContext = std::unique_ptr<spng_ctx, SpngFree>;

[[noreturn]] void fail(int rc, size_t size, const std::string& name, const char* stage) {
  if (rc == SPNG_IO_EOF || rc == SPNG_EIO || rc == SPNG_EOF) {
    throw DataError(c10::str(name, ": truncated PNG: the file (", size, " bytes) ends before its ",
                             stage, " does"));
  }
  if (rc == SPNG_ECHUNK_LIMITS) {
    throw DataError(c10::str(name, ": PNG with an ancillary chunk larger than ",
                             kMaxChunkBytes >> 20, " MiB decompressed (or ",
                             kMaxChunkCacheBytes >> 20, " MiB in all): corrupt or hostile"));
  }
  throw DataError(c10::str(name, ": corrupt PNG (", stage, ": ", spng_strerror(rc), ")"));
}

// A decoder reading `data`, its header read and checked.
SpngContext open_png(const uint8_t* data, size_t size, const std::string& name, spng_ihdr& ihdr) {
  SpngContext ctx(spng_ctx_new(0));
  if (!ctx) throw Error(c10::str("libspng cannot create a decoder for ", name, " (out of memory)"));
  int rc = spng_set_chunk_limits(ctx.get(), kMaxChunkBytes, kMaxChunkCacheBytes);
  // Every chunk's CRC is checked, ancillary ones too, as PIL does for those before the image data.
  // PIL does not check the image data's (IDAT) CRCs; a wrong one is an error here all the same.
  if (rc == 0) rc = spng_set_crc_action(ctx.get(), SPNG_CRC_ERROR, SPNG_CRC_ERROR);
  if (rc == 0) rc = spng_set_png_buffer(ctx.get(), data, size);
  if (rc != 0) throw Error(c10::str("libspng cannot read ", name, ": ", spng_strerror(rc)));
  rc = spng_get_ihdr(ctx.get(), &ihdr);
  if (rc != 0) fail(rc, size, name, "header");
  return ctx;
}

// 16-bit gray, decoded as host-endian uint16 samples at the start of `pixels`, becomes RGB in
// place, from the last pixel back: PIL's I;16 -> RGB conversion clips to 255 (Convert.c I16_RGB)
// where every other 16-bit colour type keeps the high byte. Pixel i's 3 bytes never reach
// below pixel i's own sample, so nothing is read after it is overwritten.
void gray16_to_rgb_in_place(uint8_t* pixels, size_t count) {
  for (size_t i = count; i-- > 0;) {
    uint16_t sample;
    std::memcpy(&sample, pixels + 2 * i, 2);
    const uint8_t v = sample > 255 ? 255 : uint8_t(sample);
    pixels[3 * i] = pixels[3 * i + 1] = pixels[3 * i + 2] = v;
  }
}

}  // namespace

ImageInfo read_png_info(const uint8_t* data, size_t size, const std::string& name) {
  spng_ihdr ihdr{};
  open_png(data, size, name, ihdr);
  return ImageInfo{ImageFormat::kPng, int(ihdr.width), int(ihdr.height)};
}

RgbImage decode_png(const uint8_t* data, size_t size, const std::string& name,
                    const DecodeOptions& options) {
  spng_ihdr ihdr{};
  SpngContext ctx = open_png(data, size, name, ihdr);
  RgbImage image;
  image.pixels.resize(checked_rgb_bytes(ihdr.width, ihdr.height, "PNG", name, options));
  image.width = int(ihdr.width);
  image.height = int(ihdr.height);
  const bool gray16 = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth == 16;
  // SPNG_FMT_RGB8 replicates gray, drops alpha, looks palettes up, scales 1/2/4-bit samples by
  // bit replication (PIL's "1", "L;2", "L;4" unpackers: x255, x85, x17) and keeps 16-bit
  // samples' high byte (PIL's "RGB;16B", "LA;16B", "RGBA;16B"). No flags: no tRNS, no gamma.
  const int format = gray16 ? SPNG_FMT_PNG : SPNG_FMT_RGB8;
  size_t decoded_bytes = 0;
  int rc = spng_decoded_image_size(ctx.get(), format, &decoded_bytes);
  if (rc != 0) fail(rc, size, name, "header");
  if (decoded_bytes > image.pixels.size()) {
    throw Error(c10::str("libspng wants ", decoded_bytes, " bytes for ", name, ", more than ",
                         image.pixels.size()));  // an invariant: RGB8 or 16-bit gray
  }
  rc = spng_decode_image(ctx.get(), image.pixels.data(), decoded_bytes, format, 0);
  if (rc != 0) fail(rc, size, name, "image data");
  if (gray16) gray16_to_rgb_in_place(image.pixels.data(), size_t(image.width) * image.height);
  return image;
}

}  // namespace detail

#endif  // DDP_HAVE_PNG

}  // namespace ddp::data
