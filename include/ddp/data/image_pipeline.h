// An ImageFolder as the model sees it: each sample read from its file, decoded (image.h), cropped
// and resized as torchvision's transforms do on PIL images (resample.h is Pillow's bilinear
// filter), flipped, and made float32 CHW (ToTensor, then Normalize). Two pipelines, those of
// torchvision's ImageNet example: training takes RandomResizedCrop(size) + RandomHorizontalFlip,
// evaluation Resize(resize) + CenterCrop(size).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include <torch/arg.h>

#include "ddp/data/image_folder.h"
#include "ddp/data/image_transforms.h"
#include "ddp/data/sample_source.h"

namespace ddp::data {

/// ImageNet's per-channel mean and standard deviation (RGB), as torchvision's examples use.
extern const std::vector<float> kImageNetMean;
extern const std::vector<float> kImageNetStd;

struct ImagePipelineOptions {
  enum class Kind { kTrain, kEval };
  TORCH_ARG(Kind, kind) = Kind::kTrain;
  TORCH_ARG(int, size) = 224;    // the output's side
  TORCH_ARG(int, resize) = 256;  // evaluation: the shorter side before the centre crop
  TORCH_ARG(RandomResizedCropParams, crop);
  TORCH_ARG(bool, horizontal_flip) = true;  // training: RandomHorizontalFlip(0.5)
  TORCH_ARG(bool, normalize) = true;
  TORCH_ARG(std::vector<float>, mean) = kImageNetMean;
  TORCH_ARG(std::vector<float>, std) = kImageNetStd;
  TORCH_ARG(uint64_t, seed) = 0;
  /// Training: decode a JPEG at 1/2, 1/4 or 1/8 scale in the DCT domain when the crop is still at
  /// least `size` pixels on each side at that scale (what PIL's draft() does). Faster, with
  /// pixels close to but not those of a full decode; evaluation always decodes in full.
  TORCH_ARG(bool, scaled_decode) = true;
  TORCH_ARG(int64_t, max_pixels) = 89478485;  // PIL's decompression-bomb limit
};

/// The samples of an ImageFolder through one of the pipelines: data float32 [3, size, size],
/// target the int64 label. A file that cannot be read or decoded throws IoError or DataError
/// naming it.
class ImageFolderSource : public SampleSource {
 public:
  ImageFolderSource(std::shared_ptr<const ImageFolder> folder, ImagePipelineOptions options);
  size_t size() const override { return folder_->size(); }
  Example get(const SampleContext& context) const override;
  std::vector<int64_t> data_shape() const override;
  torch::Tensor write(const SampleContext& context, const torch::Tensor& row) const override;

  const ImageFolder& folder() const { return *folder_; }
  const ImagePipelineOptions& options() const { return options_; }

  /// The uint8 HWC RGB pixels of sample `index` after the geometric transforms (before ToTensor),
  /// for tests and previews; `flipped` says whether the flip was drawn.
  std::vector<uint8_t> pixels(const SampleContext& context, bool* flipped = nullptr) const;

 private:
  std::shared_ptr<const ImageFolder> folder_;
  ImagePipelineOptions options_;
  // ToTensor then Normalize of each channel's 256 values, computed once: the same floats as
  // computing them per pixel.
  std::array<std::array<float, 256>, 3> to_float_;
};

}  // namespace ddp::data
