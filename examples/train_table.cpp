// Your own data, not images: rows of a table (16 numeric features, 3 classes by a hidden rule),
// served through the loader's one small interface, ddp::data::SampleSource, to a small MLP in
// DistributedDataParallel. The loader's threads, batching and deterministic order come with it;
// each rank visits its DistributedSampler shard. Run it under the launcher:
//   build/ddprun --nproc-per-node 2 -- build/example-train-table
// (Data already written for LibTorch's torch::data API can keep it: ddp::DistributedSampler is
// also a LibTorch sampler, for torch::data::make_data_loader(dataset, sampler, options).)
#include <cstdio>

#include <torch/torch.h>

#include "ddp/data/loader.h"
#include "ddp/data/sample_source.h"
#include "ddp/ddp.h"
#include "ddp/sampler.h"

// The table: every rank makes the same rows from the same seed. A real program would read a
// file here; get() may do any work, on the loader's threads.
class TableRows : public ddp::data::SampleSource {
 public:
  TableRows(int64_t rows, uint64_t seed) {
    auto gen = at::detail::createCPUGenerator(seed);
    features_ = torch::randn({rows, 16}, gen);
    const torch::Tensor rule = torch::randn({16, 3}, gen);
    labels_ = features_.matmul(rule).argmax(1);
  }
  size_t size() const override { return size_t(features_.size(0)); }
  ddp::data::Example get(const ddp::data::SampleContext& context) const override {
    return {features_[context.index], labels_[context.index]};
  }

 private:
  torch::Tensor features_, labels_;
};

int main() {
  auto group = ddp::ProcessGroup::init({});
  const int rank = group->rank();
  auto table = std::make_shared<TableRows>(4000, /*seed=*/1);

  torch::manual_seed(0);
  auto model =
      torch::nn::Sequential(torch::nn::Linear(16, 64), torch::nn::ReLU(), torch::nn::Linear(64, 3));
  ddp::DistributedDataParallel ddp_model(model.ptr(), group);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  ddp::DistributedSampler sampler(int64_t(table->size()), group->size(), rank);
  ddp::data::Loader loader(table, ddp::data::LoaderOptions().batch_size(50).threads(2));

  for (int epoch = 0; epoch < 5; ++epoch) {
    sampler.set_epoch(epoch);
    loader.start_epoch(sampler.indices(), epoch);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    while (auto batch = loader.next()) {  // batch->images: [50, 16] features; labels: [50]
      optimizer.zero_grad();
      const torch::Tensor logits = ddp_model.forward(batch->images);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, batch->labels);
      loss.backward();  // gradients averaged over the ranks while backward runs
      optimizer.step();
      loss_sum += loss.item<double>() * double(batch->labels.size(0));
      correct += logits.argmax(1).eq(batch->labels).sum().item<int64_t>();
      seen += batch->labels.size(0);
    }
    if (rank == 0) {
      std::printf("epoch %d: loss %.4f, train accuracy %.1f%% (rank 0's share)\n", epoch + 1,
                  loss_sum / double(seen), 100.0 * double(correct) / double(seen));
    }
  }
  return 0;
}
