// JPEG and PNG decoding against PIL's Image.open(f).convert("RGB") (what torchvision's
// ImageFolder gives): every reference file from tests/python/image_reference.py decodes to PIL's
// very bytes, and every file PIL refuses is refused with a message naming it and the problem.
// Pillow 9 (Debian 12's 9.4) does not give black for palette indices past the end of the palette,
// as libspng and Pillow 10.4, 11.3, 12.0 and 13 do: that one file is compared from Pillow 10 on.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "ddp/data/image.h"
#include "ddp/error.h"
#include "support/error_of.h"
#include "support/parts.h"
#include "support/pil_reference.h"

namespace ddp::data {
namespace {

const test::PilReference& reference() {
  static const test::PilReference files("decode");
  return files;
}

using test::error_of;

bool is_jpeg_name(const std::string& name) { return name.find(".jpg") != std::string::npos; }

// Decodes every "ok" file of the manifest whose name is a JPEG (or not) and compares with PIL.
void expect_all_equal_to_pil(bool jpeg) {
  const test::PilReference& ref = reference();
  ASSERT_EQ(ref.error(), "");
  int cases = 0;
  for (const std::string& line : ref.lines()) {
    std::istringstream fields(line);
    std::string name, outcome;
    int width = 0, height = 0;
    fields >> name >> outcome >> width >> height;
    if (outcome != "ok" || is_jpeg_name(name) != jpeg) continue;
    if (name == "palette_out_of_range.png" && ref.pillow_major() < 10) continue;
    SCOPED_TRACE(name);
    const std::vector<uint8_t> file = test::read_bytes(ref.path(name));
    const std::vector<uint8_t> expected = test::read_bytes(ref.path(name + ".rgb"));
    const ImageInfo info = read_image_info(file.data(), file.size(), name);
    EXPECT_EQ(info.format, jpeg ? ImageFormat::kJpeg : ImageFormat::kPng);
    EXPECT_EQ(info.width, width);
    EXPECT_EQ(info.height, height);
    const RgbImage image = decode_image(file.data(), file.size(), name);
    ASSERT_EQ(image.width, width);
    ASSERT_EQ(image.height, height);
    ASSERT_EQ(image.pixels.size(), expected.size());
    const test::ByteDiff diff =
        test::byte_diff(image.pixels.data(), expected.data(), expected.size());
    EXPECT_EQ(diff.max, 0) << diff.count << " of " << expected.size() << " bytes differ";
    ++cases;
  }
  EXPECT_GE(cases, jpeg ? 20 : 50);
}

TEST(ImageDecode, SniffsTheFormatFromMagicBytes) {
  const uint8_t jpeg[] = {0xff, 0xd8, 0xff, 0xe0};
  const uint8_t png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a', 0, 0};
  EXPECT_EQ(sniff_image_format(jpeg, sizeof jpeg), ImageFormat::kJpeg);
  EXPECT_EQ(sniff_image_format(png, sizeof png), ImageFormat::kPng);
  EXPECT_EQ(sniff_image_format(gif, sizeof gif), ImageFormat::kUnknown);
  EXPECT_EQ(sniff_image_format(jpeg, 2), ImageFormat::kUnknown);
  EXPECT_EQ(sniff_image_format(png, 7), ImageFormat::kUnknown);
  EXPECT_EQ(sniff_image_format(nullptr, 0), ImageFormat::kUnknown);
}

TEST(ImageDecode, JpegEqualsPil) {
  DDP_SKIP_WITHOUT(kJpeg);
  expect_all_equal_to_pil(true);
}

TEST(ImageDecode, PngEqualsPil) {
  DDP_SKIP_WITHOUT(kPng);
  expect_all_equal_to_pil(false);
}

TEST(ImageDecode, FilesPilRefusesAreErrorsNamingFileAndProblem) {
  const test::PilReference& ref = reference();
  ASSERT_EQ(ref.error(), "");
  int cases = 0;
  for (const std::string& line : ref.lines()) {
    std::istringstream fields(line);
    std::string name, outcome, words;
    fields >> name >> outcome;
    if (outcome != "error") continue;
    std::getline(fields >> std::ws, words);
    if (name.find(".jpg") != std::string::npos && name != "empty.jpg" && !test::parts::kJpeg) {
      continue;
    }
    if (name.find(".png") != std::string::npos && name != "lying_name.png" && !test::parts::kPng) {
      continue;
    }
    SCOPED_TRACE(name);
    const std::vector<uint8_t> file = test::read_bytes(ref.path(name));
    const std::string path = ref.path(name);
    const std::string message =
        error_of<DataError>([&] { decode_image(file.data(), file.size(), path); });
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
    EXPECT_NE(message.find(words), std::string::npos) << message;
    ++cases;
  }
  EXPECT_GE(cases, 3);
}

TEST(ImageDecode, HeaderOnlyReadsTheSizeOfATruncatedFile) {
  DDP_SKIP_WITHOUT(kJpeg);
  const test::PilReference& ref = reference();
  ASSERT_EQ(ref.error(), "");
  // PIL's Image.open reads the size of these too; only loading the pixels fails.
  for (const char* name : {"truncated.jpg", "truncated_progressive.jpg"}) {
    const std::vector<uint8_t> file = test::read_bytes(ref.path(name));
    const ImageInfo info = read_image_info(file.data(), file.size(), name);
    EXPECT_EQ(info.width, 203) << name;
    EXPECT_EQ(info.height, 157) << name;
  }
  const std::vector<uint8_t> text = test::read_bytes(ref.path("notes.txt"));
  EXPECT_NE(error_of<DataError>([&] {
              read_image_info(text.data(), text.size(), "notes.txt");
            }).find("notes.txt: not a JPEG or PNG image"),
            std::string::npos);
}

// Each output pixel of a 1/d decode against the mean of its d x d block in the full decode.
double mean_abs_diff_to_block_means(const RgbImage& full, const RgbImage& scaled, int d) {
  double total = 0;
  for (int y = 0; y < scaled.height; ++y) {
    for (int x = 0; x < scaled.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        double sum = 0;
        int n = 0;
        for (int yy = y * d; yy < std::min(full.height, y * d + d); ++yy) {
          for (int xx = x * d; xx < std::min(full.width, x * d + d); ++xx) {
            sum += full.pixels[(size_t(yy) * full.width + xx) * 3 + c];
            ++n;
          }
        }
        total += std::abs(sum / n - scaled.pixels[(size_t(y) * scaled.width + x) * 3 + c]);
      }
    }
  }
  return total / (double(scaled.width) * scaled.height * 3);
}

TEST(ImageDecode, JpegScaledDecodingHasScaledSize) {
  DDP_SKIP_WITHOUT(kJpeg);
  const test::PilReference& ref = reference();
  ASSERT_EQ(ref.error(), "");
  for (const char* name : {"q75_420.jpg", "q95_444.jpg", "progressive_420.jpg", "gray.jpg",
                           "cmyk_from_rgb.jpg", "small_17x9.jpg", "small_1x1.jpg"}) {
    const std::vector<uint8_t> file = test::read_bytes(ref.path(name));
    const RgbImage full = decode_image(file.data(), file.size(), name);
    for (int d : {2, 4, 8}) {
      SCOPED_TRACE(std::string(name) + " at 1/" + std::to_string(d));
      DecodeOptions options;
      options.scale_denominator = d;
      const RgbImage scaled = decode_image(file.data(), file.size(), name, options);
      EXPECT_EQ(scaled.width, scaled_size(full.width, d));
      EXPECT_EQ(scaled.height, scaled_size(full.height, d));
      ASSERT_EQ(scaled.pixels.size(), size_t(scaled.width) * scaled.height * 3);
      // The DCT-domain scaling is no box filter, but it shows the same picture.
      EXPECT_LT(mean_abs_diff_to_block_means(full, scaled, d), 6.0);
    }
  }
}

TEST(ImageDecode, PngIgnoresTheScale) {
  DDP_SKIP_WITHOUT(kPng);
  const std::vector<uint8_t> file = test::read_bytes(reference().path("rgb8.png"));
  DecodeOptions options;
  options.scale_denominator = 4;
  const RgbImage image = decode_image(file.data(), file.size(), "rgb8.png", options);
  EXPECT_EQ(image.width, 61);
  EXPECT_EQ(image.height, 43);
}

TEST(ImageDecode, ScaledSizeRoundsUp) {
  EXPECT_EQ(scaled_size(203, 1), 203);
  EXPECT_EQ(scaled_size(203, 2), 102);
  EXPECT_EQ(scaled_size(157, 4), 40);
  EXPECT_EQ(scaled_size(157, 8), 20);
  EXPECT_EQ(scaled_size(1, 8), 1);
  EXPECT_EQ(scaled_size(16, 8), 2);
  EXPECT_EQ(scaled_size(65535, 8), 8192);
}

TEST(ImageDecode, PixelLimitIsCheckedBeforeDecoding) {
  for (const char* name : {"q75_420.jpg", "rgb8.png"}) {
    const bool jpeg = is_jpeg_name(name);
    if (jpeg ? !test::parts::kJpeg : !test::parts::kPng) continue;
    SCOPED_TRACE(name);
    const std::vector<uint8_t> file = test::read_bytes(reference().path(name));
    const ImageInfo info = read_image_info(file.data(), file.size(), name);
    const int64_t pixels = int64_t(info.width) * info.height;
    DecodeOptions options;
    options.max_pixels = pixels;
    EXPECT_EQ(decode_image(file.data(), file.size(), name, options).width, info.width);
    options.max_pixels = pixels - 1;
    options.scale_denominator = jpeg ? 8 : 1;  // the full size counts, whatever the scale
    const std::string message =
        error_of<DataError>([&] { decode_image(file.data(), file.size(), name, options); });
    EXPECT_NE(message.find(std::string(name) + ": "), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(pixels) + " pixels, more than the limit of " +
                           std::to_string(pixels - 1)),
              std::string::npos)
        << message;
  }
}

TEST(ImageDecode, BadOptionsAreInvalidArguments) {
  const uint8_t jpeg[] = {0xff, 0xd8, 0xff, 0xe0};
  DecodeOptions options;
  options.scale_denominator = 3;
  EXPECT_NE(error_of<InvalidArgument>([&] {
              decode_image(jpeg, sizeof jpeg, "a.jpg", options);
            }).find("scale_denominator is 3; it takes 1, 2, 4 or 8"),
            std::string::npos);
  options.scale_denominator = 1;
  options.max_pixels = 0;
  EXPECT_NE(error_of<InvalidArgument>([&] {
              decode_image(jpeg, sizeof jpeg, "a.jpg", options);
            }).find("max_pixels is 0"),
            std::string::npos);
}

TEST(ImageDecode, AvailabilityFollowsTheBuild) {
  EXPECT_EQ(jpeg_decoding_available(), test::parts::kJpeg);
  EXPECT_EQ(png_decoding_available(), test::parts::kPng);
}

TEST(ImageDecode, BuildWithoutADecoderSaysHowToGetOne) {
  if (test::parts::kJpeg && test::parts::kPng) GTEST_SKIP() << "both decoders are built in";
  const test::PilReference& ref = reference();
  ASSERT_EQ(ref.error(), "");
  if (!test::parts::kJpeg) {
    const std::vector<uint8_t> file = test::read_bytes(ref.path("q75_420.jpg"));
    EXPECT_NE(error_of<DataError>([&] {
                decode_image(file.data(), file.size(), "x.jpg");
              }).find("x.jpg: a JPEG image, and this build has no JPEG decoder"),
              std::string::npos);
  }
  if (!test::parts::kPng) {
    const std::vector<uint8_t> file = test::read_bytes(ref.path("rgb8.png"));
    EXPECT_NE(error_of<DataError>([&] {
                decode_image(file.data(), file.size(), "x.png");
              }).find("install libspng-dev"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace ddp::data
