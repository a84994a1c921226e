// Pillow's ImagingResample with its BILINEAR filter on 8-bit RGB (libImaging/Resample.c and
// _imaging.c's _resize, Pillow 13), rewritten for speed but computing the same integers: the
// same double-precision coefficients from the same float box, the same rounding to 22-bit fixed
// point, the passes in Pillow's order with the first one's result rounded to 8 bits, a pass
// skipped where Pillow skips it. The first pass covers only the rows (or columns) the second
// reads, which changes no pixel.
#include "ddp/data/resample.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/environment.h"
#include "ddp/error.h"

namespace ddp::data {
namespace {

// Pillow's PRECISION_BITS: 8 bits for the result, 2 for overflow of filters with negative lobes.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr double kSupport = 1.0;  // the bilinear (triangle) filter's

double bilinear_filter(double x) {
  if (x < 0.0) x = -x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

// For each output pixel, the first input pixel and how many it reads, and their fixed-point
// weights (`taps` per output pixel, unused ones 0): Pillow's precompute_coeffs followed by
// normalize_coeffs_8bpc.
struct Coefficients {
  int taps = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;
};

Coefficients precompute(int in_size, float in0, float in1, int out_size) {
  // As in Pillow: the box's width in float, everything after in double.
  const float box_size = in1 - in0;
  const double scale = double(box_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kSupport * filterscale;
  Coefficients c;
  c.taps = int(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.weights.assign(size_t(out_size) * c.taps, 0);
  std::vector<double> k(c.taps);
  const double inv_filterscale = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    int xmin = int(center - support + 0.5);  // truncation toward zero, as Pillow's (int) cast
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      k[x] = bilinear_filter((x + xmin - center + 0.5) * inv_filterscale);
      ww += k[x];
    }
    int32_t* out = &c.weights[size_t(xx) * c.taps];
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[x] / ww : k[x];
      out[x] = w < 0 ? int32_t(-0.5 + w * (1 << kPrecisionBits))
                     : int32_t(0.5 + w * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t v) {
  v >>= kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// The vertical pass: output row yy weighs rows first[yy].. of `rows` (row y at rows + y * pitch,
// `bytes` bytes each), summed in `sums` (`bytes` of them). Row by row, so the inner loop runs
// along the row and vectorises: compiled once per x86 tier below and picked at run time (x86-64's
// baseline, SSE2, has no 32-bit multiply: AVX2's copy is 3x faster). Elsewhere (arm64: NEON is
// its baseline) it is compiled once.
using WeighColumns = void (*)(const uint8_t* rows, size_t pitch, size_t bytes,
                              const Coefficients& c, int out_height, uint8_t* out, int32_t* sums);

[[gnu::always_inline]] inline void weigh_columns_body(const uint8_t* rows, size_t pitch,
                                                      size_t bytes, const Coefficients& c,
                                                      int out_height, uint8_t* out, int32_t* sums) {
  for (int yy = 0; yy < out_height; ++yy) {
    int32_t* __restrict s = sums;
    for (size_t i = 0; i < bytes; ++i) s[i] = 1 << (kPrecisionBits - 1);
    const int32_t* k = &c.weights[size_t(yy) * c.taps];
    for (int y = 0, n = c.count[yy]; y < n; ++y) {
      const uint8_t* __restrict row = rows + size_t(c.first[yy] + y) * pitch;
      const int32_t weight = k[y];
      for (size_t i = 0; i < bytes; ++i) s[i] += row[i] * weight;
    }
    uint8_t* __restrict line = out + size_t(yy) * bytes;
    for (size_t i = 0; i < bytes; ++i) line[i] = clip8(s[i]);
  }
}

// The same integer sums in each: only the instructions differ.
void weigh_columns_baseline(const uint8_t* rows, size_t pitch, size_t bytes, const Coefficients& c,
                            int out_height, uint8_t* out, int32_t* sums) {
  weigh_columns_body(rows, pitch, bytes, c, out_height, out, sums);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define DDP_RESAMPLE_X86_TIERS 1
[[gnu::target("avx2,fma")]] void weigh_columns_avx2(const uint8_t* rows, size_t pitch, size_t bytes,
                                                    const Coefficients& c, int out_height,
                                                    uint8_t* out, int32_t* sums) {
  weigh_columns_body(rows, pitch, bytes, c, out_height, out, sums);
}

[[gnu::target("avx512f,avx512bw,avx512vl,avx512dq")]] void weigh_columns_avx512(
    const uint8_t* rows, size_t pitch, size_t bytes, const Coefficients& c, int out_height,
    uint8_t* out, int32_t* sums) {
  weigh_columns_body(rows, pitch, bytes, c, out_height, out, sums);
}
#endif

struct ResampleKernel {
  const char* name;
  WeighColumns weigh_columns;
};

// The best copy this CPU runs, capped by ATEN_CPU_CAPABILITY ("default", "avx2", "avx512"), as
// LibTorch's own kernels are: so scripts/cpu-tier.sh plays an older CPU here too.
ResampleKernel choose_kernel() {
#if defined(DDP_RESAMPLE_X86_TIERS)
  const char* cap = std::getenv(env::kAtenCpuCapability);
  const std::string capability = cap ? cap : "";
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  // Other values LibTorch ignores (it warns and takes the best), and so does this.
  if (avx512 && capability != "avx2" && capability != "default") {
    return {"avx512", weigh_columns_avx512};
  }
  if (avx2 && capability != "default") return {"avx2", weigh_columns_avx2};
  return {"sse2", weigh_columns_baseline};
#else
  return {"baseline", weigh_columns_baseline};
#endif
}

const ResampleKernel& kernel() {
  static const ResampleKernel chosen = choose_kernel();
  return chosen;
}

void weigh_columns(const uint8_t* rows, size_t pitch, size_t bytes, const Coefficients& c,
                   int out_height, uint8_t* out, int32_t* sums) {
  kernel().weigh_columns(rows, pitch, bytes, c, out_height, out, sums);
}

// The vertical pass (weigh_columns) with its own sums.
void resample_columns(const uint8_t* rows, size_t pitch, size_t bytes, const Coefficients& c,
                      int out_height, uint8_t* out) {
  std::vector<int32_t> sums(bytes);
  weigh_columns(rows, pitch, bytes, c, out_height, out, sums.data());
}

// The horizontal pass over `rows` rows of `in` (`pitch` bytes apart) into `out`, as a vertical
// one: kBlock rows at a time are turned on their side (each column's pixels made a row), weighed
// by weigh_columns, and turned back, all within the L1 cache (1.9x faster than weighing each
// pixel's 3 channels in turn).
void resample_rows(const uint8_t* in, size_t pitch, int rows, const Coefficients& c, int out_width,
                   uint8_t* out) {
  constexpr int kBlock = 32;
  Coefficients side = c;  // over the columns read only, from `first` on
  const int first = c.first[0];
  const int columns = c.first[out_width - 1] + c.count[out_width - 1] - first;
  for (int& x : side.first) x -= first;
  std::vector<uint8_t> turned(size_t(columns) * kBlock * 3);
  std::vector<uint8_t> weighed(size_t(out_width) * kBlock * 3);
  std::vector<int32_t> sums(kBlock * 3);
  const size_t out_bytes = size_t(out_width) * 3;
  for (int y0 = 0; y0 < rows; y0 += kBlock) {
    const int n = rows - y0 < kBlock ? rows - y0 : kBlock;
    const size_t bytes = size_t(n) * 3;
    for (int y = 0; y < n; ++y) {
      const uint8_t* row = in + size_t(y0 + y) * pitch + size_t(first) * 3;
      uint8_t* to = turned.data() + y * 3;
      for (int x = 0; x < columns; ++x, row += 3, to += bytes) {
        to[0] = row[0];
        to[1] = row[1];
        to[2] = row[2];
      }
    }
    weigh_columns(turned.data(), bytes, bytes, side, out_width, weighed.data(), sums.data());
    for (int y = 0; y < n; ++y) {
      const uint8_t* from = weighed.data() + y * 3;
      uint8_t* row = out + size_t(y0 + y) * out_bytes;
      for (int xx = 0; xx < out_width; ++xx, from += bytes, row += 3) {
        row[0] = from[0];
        row[1] = from[1];
        row[2] = from[2];
      }
    }
  }
}

void check_arguments(const uint8_t* src, int width, int height, size_t stride, const float b[4],
                     int out_width, int out_height, const uint8_t* out) {
  if (src == nullptr || out == nullptr || width < 1 || height < 1 || stride < size_t(width) * 3) {
    throw InvalidArgument(
        c10::str("resize_bilinear: no image (", width, " x ", height, ", stride ", stride, ")"));
  }
  if (out_width < 1 || out_height < 1) {
    throw InvalidArgument(c10::str("resize_bilinear: output size ", out_width, " x ", out_height,
                                   "; height and width must be > 0"));
  }
  if (b[0] < 0 || b[1] < 0 || b[2] > width || b[3] > height || b[2] - b[0] < 0 || b[3] - b[1] < 0) {
    throw InvalidArgument(c10::str("resize_bilinear: box (", b[0], ", ", b[1], ", ", b[2], ", ",
                                   b[3], ") is not inside the ", width, " x ", height,
                                   " image, or is upside down"));
  }
}

}  // namespace

const char* resize_bilinear_kernel() { return kernel().name; }

void resize_bilinear(const uint8_t* src, int width, int height, size_t stride, const Box& box,
                     int out_width, int out_height, uint8_t* out) {
  // Pillow takes the box as floats (PyArg_ParseTuple's "f").
  const float b[4] = {float(box.x0), float(box.y0), float(box.x1), float(box.y1)};
  check_arguments(src, width, height, stride, b, out_width, out_height, out);
  const size_t out_bytes = size_t(out_width) * 3;
  // _resize: an integral box of the output's size is a crop.
  if (b[0] - int(b[0]) == 0 && b[2] - b[0] == out_width && b[1] - int(b[1]) == 0 &&
      b[3] - b[1] == out_height) {
    for (int y = 0; y < out_height; ++y) {
      std::memcpy(out + y * out_bytes, src + (size_t(b[1]) + y) * stride + size_t(b[0]) * 3,
                  out_bytes);
    }
    return;
  }
  const bool need_horizontal = out_width != width || b[0] != 0 || b[2] != out_width;
  const bool need_vertical = out_height != height || b[1] != 0 || b[3] != out_height;
  if (!need_horizontal) {
    resample_columns(src, stride, out_bytes, precompute(height, b[1], b[3], out_height), out_height,
                     out);
    return;
  }
  Coefficients horizontal = precompute(width, b[0], b[2], out_width);
  if (!need_vertical) {
    resample_rows(src, stride, out_height, horizontal, out_width, out);
    return;
  }
  Coefficients vertical = precompute(height, b[1], b[3], out_height);
  // Pillow 13 runs the vertical pass first where the image loses more than twice as many rows as
  // columns (which changes the pixels a little: the other pass's input is rounded to 8 bits).
  if (height - out_height > 0 && height - out_height > (width - out_width) * 2) {
    // Only the columns the horizontal pass reads.
    const int first = horizontal.first[0];
    const int last = horizontal.first[out_width - 1] + horizontal.count[out_width - 1];
    const size_t bytes = size_t(last - first) * 3;
    std::vector<uint8_t> columns(out_height * bytes);
    resample_columns(src + size_t(first) * 3, stride, bytes, vertical, out_height, columns.data());
    for (int& x : horizontal.first) x -= first;
    resample_rows(columns.data(), bytes, out_height, horizontal, out_width, out);
    return;
  }
  // Only the rows the vertical pass reads.
  const int first = vertical.first[0];
  const int last = vertical.first[out_height - 1] + vertical.count[out_height - 1];
  std::vector<uint8_t> rows(size_t(last - first) * out_bytes);
  resample_rows(src + size_t(first) * stride, stride, last - first, horizontal, out_width,
                rows.data());
  for (int& y : vertical.first) y -= first;
  resample_columns(rows.data(), out_bytes, out_bytes, vertical, out_height, out);
}

}  // namespace ddp::data
