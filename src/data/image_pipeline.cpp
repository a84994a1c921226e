#include "ddp/data/image_pipeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <c10/util/StringUtil.h>

#include "ddp/data/image.h"
#include "ddp/data/resample.h"
#include "ddp/error.h"

namespace ddp::data {

const std::vector<float> kImageNetMean = {0.485f, 0.456f, 0.406f};
const std::vector<float> kImageNetStd = {0.229f, 0.224f, 0.225f};

namespace {

std::vector<uint8_t> read_file(const std::string& path) {
  // O_NONBLOCK: a named pipe called x.jpg would otherwise block open() until a writer comes,
  // and with it the loader thread, next() and every other rank.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw IoError(c10::str(path, ": cannot open: ", std::strerror(errno)));
  std::vector<uint8_t> bytes;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(c10::str(path, ": not a regular file (a named pipe, a device or a directory)"));
  }
  if (st.st_size > 0) bytes.reserve(size_t(st.st_size));
  uint8_t chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      throw IoError(c10::str(path, ": cannot read: ", std::strerror(e)));
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  ::close(fd);
  return bytes;
}

// The largest JPEG scale-down (8, 4, 2) that leaves the crop at least `size` pixels each way.
int decode_denominator(const CropBox& box, int size) {
  for (int d : {8, 4, 2}) {
    if (box.width >= size * d && box.height >= size * d) return d;
  }
  return 1;
}

// RandomResizedCrop: crop then resize, both on the decoded image, or with a scaled decode the
// crop box scaled to the decoded image (Pillow resamples a fractional box).
void train_pixels(const std::vector<uint8_t>& bytes, const std::string& path,
                  const ImagePipelineOptions& o, CounterRng& rng, bool& flip, uint8_t* out) {
  const ImageInfo info = read_image_info(bytes.data(), bytes.size(), path);
  const CropBox box = random_resized_crop_box(info.width, info.height, o.crop(), rng);
  flip = o.horizontal_flip() && rng.uniform(0, 1) < 0.5;
  DecodeOptions decode;
  decode.max_pixels = o.max_pixels();
  if (o.scaled_decode() && info.format == ImageFormat::kJpeg) {
    decode.scale_denominator = decode_denominator(box, o.size());
  }
  const RgbImage image = decode_image(bytes.data(), bytes.size(), path, decode);
  const size_t stride = size_t(image.width) * 3;
  if (decode.scale_denominator == 1) {
    const uint8_t* corner = image.pixels.data() + size_t(box.top) * stride + size_t(box.left) * 3;
    resize_bilinear(corner, box.width, box.height, stride,
                    Box{0, 0, double(box.width), double(box.height)}, o.size(), o.size(), out);
    return;
  }
  const double sx = double(image.width) / info.width, sy = double(image.height) / info.height;
  const Box scaled{box.left * sx, box.top * sy, (box.left + box.width) * sx,
                   (box.top + box.height) * sy};
  resize_bilinear(image.pixels.data(), image.width, image.height, stride, scaled, o.size(),
                  o.size(), out);
}

// Resize(resize) of the whole image, then CenterCrop(size): exactly torchvision's pixels.
void eval_pixels(const std::vector<uint8_t>& bytes, const std::string& path,
                 const ImagePipelineOptions& o, uint8_t* out) {
  DecodeOptions decode;
  decode.max_pixels = o.max_pixels();
  const RgbImage image = decode_image(bytes.data(), bytes.size(), path, decode);
  std::array<int, 2> size{};
  try {
    size = resize_shorter_side(image.width, image.height, o.resize());
  } catch (const DataError& e) {
    throw DataError(c10::str(path, ": ", e.what()));
  }
  const auto [width, height] = size;
  if (int64_t(width) * height > o.max_pixels()) {
    throw DataError(c10::str(path, ": a ", image.width, "x", image.height, " image, ", width, "x",
                             height, " once resized, over the limit of ", o.max_pixels(),
                             " pixels"));
  }
  std::vector<uint8_t> resized;
  const uint8_t* pixels = image.pixels.data();
  if (width != image.width || height != image.height) {
    resized.resize(size_t(width) * size_t(height) * 3);
    resize_bilinear(image.pixels.data(), image.width, image.height, size_t(image.width) * 3,
                    Box{0, 0, double(image.width), double(image.height)}, width, height,
                    resized.data());
    pixels = resized.data();
  }
  const CropBox crop = center_crop_box(width, height, o.size());
  const size_t row = size_t(o.size()) * 3;
  for (int y = 0; y < o.size(); ++y) {
    std::memcpy(out + size_t(y) * row,
                pixels + (size_t(crop.top + y) * size_t(width) + size_t(crop.left)) * 3, row);
  }
}

}  // namespace

ImageFolderSource::ImageFolderSource(std::shared_ptr<const ImageFolder> folder,
                                     ImagePipelineOptions options)
    : folder_(std::move(folder)), options_(std::move(options)) {
  const auto& o = options_;
  if (o.size() < 1) throw InvalidArgument(c10::str("image size ", o.size(), " must be positive"));
  if (o.kind() == ImagePipelineOptions::Kind::kEval && o.resize() < o.size()) {
    throw InvalidArgument(
        c10::str("evaluation resize ", o.resize(), " is below the crop ", o.size()));
  }
  if (o.normalize() && (o.mean().size() != 3 || o.std().size() != 3)) {
    throw InvalidArgument("image normalisation needs 3 means and 3 standard deviations");
  }
  for (float s : o.std()) {
    if (o.normalize() && !(s > 0)) throw InvalidArgument("standard deviations must be positive");
  }
  for (size_t ch = 0; ch < 3; ++ch) {
    for (int v = 0; v < 256; ++v) {
      // Exactly torchvision: ToTensor divides by 255, Normalize then subtracts and divides.
      const float x = float(v) / 255.0f;
      to_float_[ch][size_t(v)] = o.normalize() ? (x - o.mean()[ch]) / o.std()[ch] : x;
    }
  }
  const auto& c = o.crop();
  if (!(0 < c.scale_min && c.scale_min <= c.scale_max && c.scale_max <= 1 && 0 < c.ratio_min &&
        c.ratio_min <= c.ratio_max)) {
    throw InvalidArgument(
        "RandomResizedCrop needs 0 < scale min <= max <= 1, 0 < ratio min <= max");
  }
}

std::vector<uint8_t> ImageFolderSource::pixels(const SampleContext& context, bool* flipped) const {
  const std::string path = folder_->path(size_t(context.index));
  const std::vector<uint8_t> bytes = read_file(path);
  std::vector<uint8_t> out(size_t(options_.size()) * size_t(options_.size()) * 3);
  bool flip = false;
  if (options_.kind() == ImagePipelineOptions::Kind::kTrain) {
    CounterRng rng(options_.seed(), uint64_t(context.epoch), uint64_t(context.index));
    train_pixels(bytes, path, options_, rng, flip, out.data());
  } else {
    eval_pixels(bytes, path, options_, out.data());
  }
  if (flipped) *flipped = flip;
  if (flip) {
    const int n = options_.size();
    for (int y = 0; y < n; ++y) {
      uint8_t* row = out.data() + size_t(y) * size_t(n) * 3;
      for (int x = 0; x < n / 2; ++x) {
        for (int ch = 0; ch < 3; ++ch) std::swap(row[x * 3 + ch], row[(n - 1 - x) * 3 + ch]);
      }
    }
  }
  return out;
}

std::vector<int64_t> ImageFolderSource::data_shape() const {
  return {3, options_.size(), options_.size()};
}

torch::Tensor ImageFolderSource::write(const SampleContext& context,
                                       const torch::Tensor& row) const {
  const std::vector<uint8_t> hwc = pixels(context);
  const int64_t n = options_.size();
  if (row.scalar_type() != torch::kFloat32 || row.sizes() != torch::IntArrayRef({3, n, n})) {
    throw InvalidArgument("image row of the wrong shape or type");
  }
  // Planar rows (NCHW batches) or interleaved ones (channels-last): written through the strides.
  float* out = row.data_ptr<float>();
  const int64_t sc = row.stride(0), sy = row.stride(1), sx = row.stride(2);
  for (int64_t y = 0; y < n; ++y) {
    const uint8_t* in = hwc.data() + size_t(y * n * 3);
    for (int64_t ch = 0; ch < 3; ++ch) {
      const float* table = to_float_[size_t(ch)].data();
      float* dst = out + ch * sc + y * sy;
      for (int64_t x = 0; x < n; ++x) dst[x * sx] = table[in[x * 3 + ch]];
    }
  }
  return torch::scalar_tensor(int64_t(folder_->label(size_t(context.index))), torch::kInt64);
}

Example ImageFolderSource::get(const SampleContext& context) const {
  torch::Tensor image = torch::empty({3, options_.size(), options_.size()}, torch::kFloat32);
  torch::Tensor target = write(context, image);
  return {image, target};
}

}  // namespace ddp::data
