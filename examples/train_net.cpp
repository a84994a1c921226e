// The three components together: a CIFAR-10-format data set (ddp::data) read by the prefetching
// loader, the tutorial's CNN (ddp::models) wrapped in DistributedDataParallel (ddp::ddp). The data
// are synthetic, written by each rank into a folder of its own, so it runs anywhere:
//   build/ddprun --nproc-per-node 2 -- build/example-train-net
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <torch/torch.h>

#include "ddp/data/cifar10.h"
#include "ddp/data/loader.h"
#include "ddp/data/synthetic.h"
#include "ddp/ddp.h"
#include "ddp/models/classifier.h"
#include "ddp/sampler.h"

int main() {
  auto group = ddp::ProcessGroup::init({});
  const int rank = group->rank();

  // 2,000 training images of 10 classes (each a noisy copy of its class's prototype).
  char folder[] = "/tmp/ddp-example-XXXXXX";
  if (::mkdtemp(folder) == nullptr) return 1;
  ddp::data::write_synthetic_cifar10(folder, ddp::data::SyntheticOptions(2000, 500));
  const ddp::data::Cifar10Dataset train(folder, ddp::data::Split::kTrain);

  torch::manual_seed(0);
  auto model = ddp::models::make_classifier("net", 3, 32, train.num_classes());
  ddp::DistributedDataParallel ddp_model(model, group);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  ddp::DistributedSampler sampler(int64_t(train.size()), group->size(), rank);
  ddp::data::Loader loader(train, ddp::data::LoaderOptions().batch_size(32));

  for (int epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    loader.start_epoch(sampler.indices(), epoch);
    double loss_sum = 0;
    int64_t correct = 0, seen = 0;
    while (auto batch = loader.next()) {
      optimizer.zero_grad();
      const torch::Tensor logits = ddp_model.forward(batch->images);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, batch->labels);
      loss.backward();  // gradients averaged over the ranks, bucket by bucket, while it runs
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
  std::filesystem::remove_all(folder);
  return 0;
}
