// The C++ twin of PyTorch's DDP tutorial: your own module, wrapped in DistributedDataParallel,
// fed by a DistributedSampler. Start it with the launcher:
//   build/ddprun --nproc-per-node 2 -- build/example-minimal
#include <cstdio>

#include <torch/torch.h>

#include "ddp/ddp.h"
#include "ddp/sampler.h"

// Any torch::nn::Module works; this one is a small MLP.
struct ToyModelImpl : torch::nn::Module {
  ToyModelImpl() {
    net1 = register_module("net1", torch::nn::Linear(10, 10));
    net2 = register_module("net2", torch::nn::Linear(10, 5));
  }
  torch::Tensor forward(torch::Tensor x) { return net2(torch::relu(net1(x))); }
  torch::nn::Linear net1{nullptr}, net2{nullptr};
};
TORCH_MODULE(ToyModel);

int main() {
  // Rank, world size and master come from the launcher's environment (ddprun, torchrun, Slurm).
  auto group = ddp::ProcessGroup::init({});
  const int rank = group->rank();

  // A fixed data set every rank can build: 1024 samples, targets a linear map of the inputs.
  torch::manual_seed(42);
  const torch::Tensor inputs = torch::randn({1024, 10});
  const torch::Tensor targets = inputs.matmul(torch::randn({10, 5}));

  ToyModel model;
  ddp::DistributedDataParallel ddp_model(model, group);  // same weights everywhere from here
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05));
  ddp::DistributedSampler sampler(inputs.size(0), group->size(), rank);

  for (int epoch = 0; epoch < 5; ++epoch) {
    sampler.set_epoch(epoch);  // a new shuffle each epoch
    const auto indices = sampler.indices();
    double loss_sum = 0;
    int steps = 0;
    for (size_t begin = 0; begin < indices.size(); begin += 32) {
      const size_t end = std::min(indices.size(), begin + 32);
      const torch::Tensor idx = torch::tensor(
          std::vector<int64_t>(indices.begin() + long(begin), indices.begin() + long(end)));
      optimizer.zero_grad();
      const torch::Tensor loss = torch::mse_loss(ddp_model.forward(inputs.index_select(0, idx)),
                                                 targets.index_select(0, idx));
      loss.backward();  // gradients are averaged over all ranks when this returns
      optimizer.step();
      loss_sum += loss.item<double>();
      ++steps;
    }
    if (rank == 0) std::printf("epoch %d: mean loss %.4f\n", epoch + 1, loss_sum / steps);
  }
  return 0;
}
