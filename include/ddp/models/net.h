// The reference program's CNN: conv(3→64) → relu → maxpool → conv(64→128) → relu → maxpool →
// flatten → linear(128·8·8 → 10). Built in the same order as the Python class, so with the same
// seed its initial weights equal Python's bit for bit; parameter names match too (conv1.weight…).
#pragma once

#include <torch/torch.h>

#include "ddp/models/classifier.h"
#include "ddp/models/onednn_conv2d.h"

namespace ddp::models {

/// The reference CNN, for `in_channels` x `side` x `side` images (3x32x32 for CIFAR-10; 1x28x28
/// for the IDX sets, where the flattened size becomes 128 x 7 x 7).
class NetImpl : public ClassifierImpl {
 public:
  explicit NetImpl(int64_t in_channels = 3, int64_t side = 32, int64_t num_classes = 10);
  torch::Tensor forward(torch::Tensor x) override;
  std::string kernels() const override { return kernels_; }

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::Conv2d conv2{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  // Blocked activations where oneDNN has jit kernels for both convolutions with blocked outputs
  // on this CPU; else channels-last ones. Says what runs each layer in kernels_.
  void choose_path(int64_t in_channels, int64_t side);
  torch::Tensor forward_blocked(const torch::Tensor& images);

  ConvAlgorithm conv2_algorithm_ = ConvAlgorithm::kDirect;  // Winograd where available
  bool blocked_ = false;  // both convolutions run with blocked outputs here
  std::string kernels_;
};
TORCH_MODULE(Net);

/// Forward FLOPs of one image through Net (multiply-adds counted as 2); backward is ~2x this.
double net_forward_flops(int64_t in_channels, int64_t side, int64_t num_classes = 10);

}  // namespace ddp::models
