#include "train/evaluation.h"

#include <algorithm>

#include "train/model.h"

namespace ddp::train {
namespace {

// This rank's slice of the test set.
std::vector<int64_t> slice(const TrainingSetup& s) {
  const int64_t n = int64_t(s.data.test->size());
  const int64_t begin = n * s.world.rank / s.world.world_size;
  const int64_t end = n * (s.world.rank + 1) / s.world.world_size;
  std::vector<int64_t> indices;
  for (int64_t i = begin; i < end; ++i) indices.push_back(i);
  return indices;
}

// Test images come through the evaluation pipeline (s.data.test), in large batches.
data::LoaderOptions test_loader_options(const TrainingSetup& s) {
  data::LoaderOptions options = s.loader_options;
  options.batch_size(std::max<int64_t>(s.loader_options.batch_size(), 256));
  return options;
}

}  // namespace

Evaluation evaluate(const TrainingSetup& s) {
  data::Loader loader(s.data.test, test_loader_options(s));
  loader.start_epoch(slice(s), 0);
  torch::NoGradGuard no_grad;
  s.model->eval();
  const int64_t classes = s.data.num_classes;
  // loss sum, correct, count, then correct and count per class
  std::vector<double> sums(size_t(3 + 2 * classes), 0.0);
  torch::Tensor class_correct = torch::zeros({classes}, torch::kFloat64),
                class_count = torch::zeros({classes}, torch::kFloat64);
  while (auto batch = loader.next()) {
    batch->to(s.device);
    const torch::Tensor logits =
        fp32_logits(s.device, s.precision, [&] { return s.model->forward(batch->images); });
    sums[0] += torch::nn::functional::cross_entropy(
                   logits, batch->labels,
                   torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
    const torch::Tensor hits = logits.argmax(1).eq(batch->labels);
    sums[1] += hits.sum().item<double>();
    sums[2] += double(batch->labels.size(0));
    class_correct += torch::bincount(batch->labels.masked_select(hits), {}, classes).cpu();
    class_count += torch::bincount(batch->labels, {}, classes).cpu();
  }
  s.model->train();
  for (int64_t c = 0; c < classes; ++c) {
    sums[size_t(3 + c)] = class_correct[c].item<double>();
    sums[size_t(3 + classes + c)] = class_count[c].item<double>();
  }
  sum_over_ranks(s.group.get(), sums);
  Evaluation result;
  result.total = int64_t(sums[2]);
  result.loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
  result.accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0;
  for (int64_t c = 0; c < classes; ++c) {
    const double n = sums[size_t(3 + classes + c)];
    result.class_accuracy.push_back(n > 0 ? sums[size_t(3 + c)] / n : 0);
  }
  return result;
}

}  // namespace ddp::train
