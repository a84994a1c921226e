// A small residual network for 32x32 (CIFAR) and 28x28 (IDX) images, after He et al. 2016's
// CIFAR ResNets: a 3x3 stem, three stages of basic blocks (widths 16·k, 32·k, 64·k, the last two
// halving the resolution), global average pooling and a linear layer. Every normalisation is a
// ddp::SyncBatchNorm, so convert_sync_batchnorm() makes the statistics cross-rank.
#pragma once

#include <vector>

#include <torch/torch.h>

#include "ddp/models/classifier.h"
#include "ddp/sync_batchnorm.h"

namespace ddp::models {

/// conv-bn-relu-conv-bn plus the input (through a 1x1 conv-bn where the shape changes), relu.
class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, shortcut_conv{nullptr};
  SyncBatchNorm bn1{nullptr}, bn2{nullptr}, shortcut_bn{nullptr};
};
TORCH_MODULE(BasicBlock);

class ResNetImpl : public ClassifierImpl {
 public:
  /// `blocks_per_stage` basic blocks in each of the three stages; `width` k scales the channels.
  ResNetImpl(int64_t in_channels, int64_t num_classes, int64_t blocks_per_stage = 2,
             int64_t width = 1);
  torch::Tensor forward(torch::Tensor x) override;

  torch::nn::Conv2d conv1{nullptr};
  SyncBatchNorm bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

/// Forward FLOPs of one `side` x `side` image through ResNet(in_channels, classes, blocks, width).
double resnet_forward_flops(int64_t in_channels, int64_t side, int64_t num_classes,
                            int64_t blocks_per_stage = 2, int64_t width = 1);

}  // namespace ddp::models
