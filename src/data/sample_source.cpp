#include "ddp/data/sample_source.h"

#include <c10/util/StringUtil.h>

#include "data/shape_text.h"
#include "ddp/error.h"

namespace ddp::data {

torch::Tensor SampleSource::write(const SampleContext& context, const torch::Tensor& row) const {
  const Example example = get(context);
  // copy_ would broadcast a [1, H, W] sample into 3 channels, or cast uint8 pixels to floats
  // unscaled, without a word: refuse both, as the loader does for sources without data_shape().
  if (!example.data.defined() || example.data.sizes() != row.sizes() ||
      example.data.scalar_type() != row.scalar_type()) {
    throw InvalidArgument(
        c10::str("sample ", context.index, " has data ",
                 example.data.defined() ? shape_text(example.data) : std::string("(none)"),
                 " where its source's data_shape() says ", shape_text(row)));
  }
  row.copy_(example.data);
  return example.target;
}

DatasetSource::DatasetSource(const Dataset& dataset, TransformOptions transforms)
    : dataset_(dataset), transforms_(std::move(transforms)) {
  const size_t channels = size_t(dataset.shape().channels);
  const auto& t = transforms_;
  if (t.normalize() && (t.mean().size() != channels || t.std().size() != channels)) {
    throw InvalidArgument(c10::str("normalisation needs ", channels,
                                   " means and standard deviations, got ", t.mean().size(), " and ",
                                   t.std().size()));
  }
  for (float s : t.std()) {
    if (!(s > 0)) throw InvalidArgument("normalisation standard deviations must be positive");
  }
}

DatasetSource::DatasetSource(std::shared_ptr<const Dataset> dataset, TransformOptions transforms)
    : DatasetSource(*(dataset ? dataset : throw InvalidArgument("DatasetSource: no data set")),
                    std::move(transforms)) {
  owned_ = std::move(dataset);
}

Example DatasetSource::get(const SampleContext& context) const {
  const ImageShape s = dataset_.shape();
  torch::Tensor image = torch::empty({s.channels, s.height, s.width}, torch::kFloat32);
  transform_image(dataset_, size_t(context.index), transforms_, context.epoch,
                  image.data_ptr<float>());
  return {image,
          torch::scalar_tensor(int64_t(dataset_.label(size_t(context.index))), torch::kInt64)};
}

}  // namespace ddp::data
