// resize_bilinear against Pillow's Image.resize(size, BILINEAR, box) and crop-then-resize
// (torchvision's resized_crop): the same bytes for every case tests/python/image_reference.py
// writes (integral and fractional boxes, up- and downscaling, 1-pixel sides, the crop shortcut).
// The bytes are Pillow 13's: Pillow 12 and earlier (9.4, Debian 12's, the reference Python under
// `setup.sh --libtorch debian`; 10.4, 11.3 and 12.0 checked too) give 1 more or less on some
// pixels of 16 of the cases, mostly tall ones, so against those the test allows 1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/data/resample.h"
#include "ddp/environment.h"
#include "ddp/error.h"
#include "support/pil_reference.h"

namespace ddp::data {
namespace {

const test::PilReference& reference() {
  static const test::PilReference files("resize");
  return files;
}

TEST(ResizeBilinear, EqualsPil) {
  const test::PilReference& ref = reference();
  ASSERT_EQ(ref.error(), "");
  ASSERT_GT(ref.pillow_major(), 0) << "image_reference.py wrote no pillow.txt";
  const int tolerance = ref.pillow_major() >= 13 ? 0 : 1;
  std::map<std::string, std::vector<uint8_t>> sources;
  int resizes = 0, crops = 0;
  for (const std::string& line : ref.lines()) {
    SCOPED_TRACE(line);
    std::istringstream fields(line);
    std::string kind, source, result;
    int width = 0, height = 0, out_width = 0, out_height = 0;
    double a = 0, b = 0, c = 0, d = 0;
    fields >> kind >> source >> width >> height >> a >> b >> c >> d >> out_width >> out_height >>
        result;
    ASSERT_FALSE(fields.fail());
    if (!sources.count(source)) sources[source] = test::read_bytes(ref.path(source + ".rgb"));
    const std::vector<uint8_t>& src = sources[source];
    ASSERT_EQ(src.size(), size_t(width) * height * 3);
    const std::vector<uint8_t> expected = test::read_bytes(ref.path(result));
    ASSERT_EQ(expected.size(), size_t(out_width) * out_height * 3);
    std::vector<uint8_t> out(expected.size(), 0xcd);
    const size_t stride = size_t(width) * 3;
    if (kind == "resize") {
      resize_bilinear(src.data(), width, height, stride, Box{a, b, c, d}, out_width, out_height,
                      out.data());
      ++resizes;
    } else {
      // crop LEFT TOP W H: the crop's pixels are the source's, rows `stride` apart.
      const int left = int(a), top = int(b), w = int(c), h = int(d);
      resize_bilinear(src.data() + size_t(top) * stride + size_t(left) * 3, w, h, stride,
                      Box{0, 0, double(w), double(h)}, out_width, out_height, out.data());
      ++crops;
    }
    const test::ByteDiff diff = test::byte_diff(out.data(), expected.data(), expected.size());
    EXPECT_LE(diff.max, tolerance) << diff.count << " of " << expected.size()
                                   << " bytes differ from Pillow " << ref.pillow_major() << "'s";
  }
  EXPECT_GE(resizes, 60);
  EXPECT_GE(crops, 20);
}

TEST(ResizeBilinear, RunsTheBestCopyThisCpuHasUnderLibTorchsCap) {
  // scripts/cpu-tier.sh's tiers set ATEN_CPU_CAPABILITY; EqualsPil then checks that copy's pixels.
  const std::string kernel = resize_bilinear_kernel();
  const char* cap = std::getenv(env::kAtenCpuCapability);
  const std::string capability = cap ? cap : "";
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  const bool avx2 = __builtin_cpu_supports("avx2");
  const std::string best = capability == "default"                                     ? "sse2"
                           : avx512 && capability != "avx2" && capability != "default" ? "avx512"
                           : avx2                                                      ? "avx2"
                                                                                       : "sse2";
  EXPECT_EQ(kernel, best) << "ATEN_CPU_CAPABILITY=" << capability;
#else
  EXPECT_EQ(kernel, "baseline");
#endif
}

TEST(ResizeBilinear, IntegralBoxOfTheOutputSizeIsACrop) {
  std::vector<uint8_t> src(7 * 5 * 3);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 37);
  std::vector<uint8_t> out(3 * 2 * 3);
  resize_bilinear(src.data(), 7, 5, 7 * 3, Box{2, 1, 5, 3}, 3, 2, out.data());
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 9; ++x) EXPECT_EQ(out[y * 9 + x], src[(1 + y) * 21 + 6 + x]);
  }
}

TEST(ResizeBilinear, RefusesWhatPilRefuses) {
  std::vector<uint8_t> src(4 * 4 * 3), out(16 * 16 * 3);
  auto message = [&](const Box& box, int w, int h) -> std::string {
    try {
      resize_bilinear(src.data(), 4, 4, 12, box, w, h, out.data());
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message(Box{0, 0, 4, 4}, 0, 3).find("height and width must be > 0"), std::string::npos);
  EXPECT_NE(message(Box{-1, 0, 4, 4}, 2, 2).find("is not inside the 4 x 4 image"),
            std::string::npos);
  EXPECT_NE(message(Box{0, 0, 4.5, 4}, 2, 2).find("is not inside"), std::string::npos);
  EXPECT_NE(message(Box{3, 0, 2, 4}, 2, 2).find("upside down"), std::string::npos);
  EXPECT_EQ(message(Box{2, 0, 2, 4}, 2, 2), "(no error)");  // an empty box PIL accepts
}

}  // namespace
}  // namespace ddp::data
