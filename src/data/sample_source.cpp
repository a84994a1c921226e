#include "ddp/data/sample_source.h"

#include "ddp/error.h"

namespace ddp::data {

torch::Tensor SampleSource::write(const SampleContext& context, const torch::Tensor& row) const {
  const Example example = get(context);
  row.copy_(example.data);
  return example.target;
}

DatasetSource::DatasetSource(const Dataset& dataset, TransformOptions transforms)
    : dataset_(dataset), transforms_(std::move(transforms)) {
  const size_t channels = size_t(dataset.shape().channels);
  const auto& t = transforms_;
  if (t.normalize() && (t.mean().size() != channels || t.std().size() != channels)) {
    throw InvalidArgument(concat("normalisation needs ", channels,
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
  // The random transforms keep their (epoch, batch, slot) keys: the same pixels as before the
  // loader had threads, so earlier runs' fingerprints still hold.
  transform_image(dataset_, size_t(context.index), transforms_, context.epoch, context.batch,
                  size_t(context.slot), image.data_ptr<float>());
  return {image,
          torch::scalar_tensor(int64_t(dataset_.label(size_t(context.index))), torch::kInt64)};
}

}  // namespace ddp::data
