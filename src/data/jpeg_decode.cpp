// JPEG through libjpeg-turbo's TurboJPEG API, giving the pixels PIL gives: the same library with
// the same settings (accurate integer DCT, fancy upsampling: both libraries' defaults), and PIL's
// own conversion of CMYK. Without TurboJPEG (DDP_WITH_JPEG=OFF) a JPEG is refused by name.
#include "ddp_build_config.h"

#if defined(DDP_HAVE_JPEG)
#include <turbojpeg.h>
#endif

#include <cstring>
#include <memory>

#include <c10/util/StringUtil.h>

#include "data/image_codec.h"
#include "ddp/data/image.h"
#include "ddp/error.h"

namespace ddp::data {

#if !defined(DDP_HAVE_JPEG)

bool jpeg_decoding_available() { return false; }

namespace detail {
namespace {

[[noreturn]] void no_jpeg(const std::string& name) {
  throw DataError(c10::str(name,
                           ": a JPEG image, and this build has no JPEG decoder (DDP_WITH_JPEG=OFF, "
                           "or libjpeg-turbo's TurboJPEG was not found): install libturbojpeg0-dev "
                           "(Debian) and configure again"));
}

}  // namespace

ImageInfo read_jpeg_info(const uint8_t*, size_t, const std::string& name) { no_jpeg(name); }

RgbImage decode_jpeg(const uint8_t*, size_t, const std::string& name, const DecodeOptions&) {
  no_jpeg(name);
}

}  // namespace detail

#else

bool jpeg_decoding_available() { return true; }

namespace detail {
namespace {

// libjpeg's JWRN_JPEG_EOF: its memory source ran out of data and inserted an EOI marker.
constexpr const char* kEofWarning = "Premature end of JPEG file";

using Decompressor = std::unique_ptr<void, int (*)(tjhandle)>;

// One decompressor per thread, reused. Not after a failure, though: TurboJPEG 2.1's
// tjDecompressHeader3 leaves libjpeg inside the header it failed on, and the next file's header
// is then parsed from there ("Bogus marker length"); such a decompressor is dropped.
Decompressor& thread_decompressor() {
  thread_local Decompressor handle(nullptr, tjDestroy);
  if (!handle) {
    handle.reset(tjInitDecompress());
    if (!handle) {
      throw Error(c10::str("TurboJPEG cannot create a decompressor: ", tjGetErrorStr2(nullptr)));
    }
  }
  return handle;
}

bool has_marker(const uint8_t* begin, const uint8_t* end, uint8_t marker) {
  for (const uint8_t* p = begin; p + 1 < end; ++p) {
    if (p[0] == 0xff && p[1] == marker) return true;
  }
  return false;
}

// Whether libjpeg ran past the end of the data somewhere: where no EOI marker follows the last
// SOS, it did (it reads on to EOI), and entropy-coded data never holds ff d9 (0xff is stuffed as
// ff 00), so one that is there is the marker libjpeg stops at.
bool ran_off_the_end(const uint8_t* data, size_t size) {
  const uint8_t* last_sos = data;
  for (const uint8_t* p = data; p + 1 < data + size; ++p) {
    if (p[0] == 0xff && p[1] == 0xda) last_sos = p;
  }
  return !has_marker(last_sos, data + size, 0xd9);
}

[[noreturn]] void fail(const std::string& name, size_t size, bool truncated, const char* stage,
                       const std::string& message) {
  if (truncated) {
    throw DataError(c10::str(name, ": truncated JPEG: the file (", size, " bytes) ends before its ",
                             stage, " does (libjpeg: ", message, ")"));
  }
  throw DataError(c10::str(name, ": corrupt JPEG (", stage, ": ", message, ")"));
}

struct JpegHeader {
  int width = 0;
  int height = 0;
  int subsampling = -1;
  int colorspace = -1;
};

// The header, whatever tjDecompressHeader3 returns: it fails on warnings libjpeg recovers from
// and on subsampling it has no TJSAMP for (3x1, 4x2, ...), which libjpeg and PIL decode; the
// size and colour space it has set by then are what counts.
JpegHeader read_header(Decompressor& tj, const uint8_t* data, size_t size,
                       const std::string& name) {
  JpegHeader h;
  const int rc = tjDecompressHeader3(tj.get(), data, static_cast<unsigned long>(size), &h.width,
                                     &h.height, &h.subsampling, &h.colorspace);
  const std::string message = rc != 0 ? tjGetErrorStr2(tj.get()) : "no frame header (SOF)";
  if (rc != 0) tj.reset();
  if (h.width < 1 || h.height < 1 || h.colorspace < 0) {
    // Without an SOS marker the data ends inside the header (libjpeg then reads an EOI).
    fail(name, size, !has_marker(data, data + size, 0xda), "header", message);
  }
  return h;
}

// Decodes into `out` or throws.
// PIL's decoder ignores libjpeg's warnings (extraneous bytes before a marker, a bad Huffman code:
// the image decodes, damaged) but fails where the data ends before the image does ("image file
// is truncated"); libjpeg's memory source warns of that: JWRN_JPEG_EOF. So a first pass stops at
// any warning; an EOF fails, and any other is decoded again without stopping, as PIL does.
// TurboJPEG keeps the text of the first warning only: an error after it replaces the text, and
// an EOF after it is told by ran_off_the_end().
void decompress(Decompressor& tj, const uint8_t* data, size_t size, const std::string& name,
                int width, int height, int pixel_format, uint8_t* out) {
  // TurboJPEG's defaults are PIL's: accurate DCT, fancy upsampling. At most 500 progressive
  // scans (TJFLAG_LIMITSCANS): more is a denial of service, never a real image.
  const int flags = TJFLAG_ACCURATEDCT | TJFLAG_LIMITSCANS;
  auto run = [&](int extra) {
    if (!tj) thread_decompressor();  // `tj` is the thread's: made anew after a failure
    return tjDecompress2(tj.get(), data, static_cast<unsigned long>(size), out, width, 0, height,
                         pixel_format, flags | extra);
  };
  if (run(TJFLAG_STOPONWARNING) == 0) return;
  const std::string first = tjGetErrorStr2(tj.get());
  const bool warning = tjGetErrorCode(tj.get()) == TJERR_WARNING;
  tj.reset();
  if (!warning || first == kEofWarning) fail(name, size, warning, "image data", first);
  if (run(0) == 0) return;
  const std::string last = tjGetErrorStr2(tj.get());
  tj.reset();
  const bool truncated = ran_off_the_end(data, size);
  if (last != first || truncated) fail(name, size, truncated, "image data", last);
}

// PIL reads 4-component JPEGs as Adobe's inverted CMYK ("CMYK;I": c = 255 - sample), then
// Image.convert("RGB") computes r = 255 - k' - c * (255 - k') / 255 with k' = 255 - sample, its
// MULDIV255 rounding: r = kr - muldiv255(255 - cr, kr) in the raw samples (checked against
// pillow 13, its Convert.c cmyk2rgb).
void inverted_cmyk_to_rgb(const uint8_t* cmyk, size_t pixels, uint8_t* rgb) {
  for (size_t i = 0; i < pixels; ++i, cmyk += 4, rgb += 3) {
    const int nk = cmyk[3];
    for (int c = 0; c < 3; ++c) {
      const int t = (255 - cmyk[c]) * nk + 128;
      rgb[c] = uint8_t(nk - (((t >> 8) + t) >> 8));
    }
  }
}

}  // namespace

ImageInfo read_jpeg_info(const uint8_t* data, size_t size, const std::string& name) {
  const JpegHeader h = read_header(thread_decompressor(), data, size, name);
  return ImageInfo{ImageFormat::kJpeg, h.width, h.height};
}

RgbImage decode_jpeg(const uint8_t* data, size_t size, const std::string& name,
                     const DecodeOptions& options) {
  const JpegHeader h = read_header(thread_decompressor(), data, size, name);
  // The limit holds for the full size whatever the scale: libjpeg keeps a progressive JPEG's
  // coefficients for the whole image.
  checked_rgb_bytes(h.width, h.height, "JPEG", name, options);
  RgbImage image;
  image.width = scaled_size(h.width, options.scale_denominator);
  image.height = scaled_size(h.height, options.scale_denominator);
  const size_t pixels = size_t(image.width) * size_t(image.height);
  image.pixels.resize(pixels * 3);
  const bool cmyk = h.colorspace == TJCS_CMYK || h.colorspace == TJCS_YCCK;
  std::unique_ptr<uint8_t[]> cmyk_pixels(cmyk ? new uint8_t[pixels * 4] : nullptr);
  decompress(thread_decompressor(), data, size, name, image.width, image.height,
             cmyk ? TJPF_CMYK : TJPF_RGB, cmyk ? cmyk_pixels.get() : image.pixels.data());
  if (cmyk) inverted_cmyk_to_rgb(cmyk_pixels.get(), pixels, image.pixels.data());
  return image;
}

}  // namespace detail

#endif  // DDP_HAVE_JPEG

}  // namespace ddp::data
