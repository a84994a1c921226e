// torchvision's ResNet-18 and ResNet-50 (He et al. 2016, torchvision's "V1.5": the stride of a
// bottleneck on its 3x3 convolution), built as torchvision.models.resnet18() / resnet50() build
// them: the same modules under the same names, so the state dict's keys and shapes are
// torchvision's (an exported state dict loads into torchvision with load_state_dict, and
// torchvision's weights load here), and the same initialisation. Every normalisation is a
// ddp::SyncBatchNorm (plain BatchNorm2d until convert_sync_batchnorm() gives it a group).
#pragma once

#include <torch/torch.h>

#include "ddp/models/classifier.h"
#include "ddp/sync_batchnorm.h"

namespace ddp::models {

/// conv3x3-bn-relu-conv3x3-bn plus the input (through `downsample` where the shape changes),
/// relu. Expansion 1.
class ResNetBasicBlockImpl : public torch::nn::Module {
 public:
  ResNetBasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  SyncBatchNorm bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(ResNetBasicBlock);

/// conv1x1-bn-relu-conv3x3(stride)-bn-relu-conv1x1-bn plus the input, relu. Expansion 4.
class ResNetBottleneckImpl : public torch::nn::Module {
 public:
  ResNetBottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  SyncBatchNorm bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(ResNetBottleneck);

/// The ImageNet ResNet: 7x7/2 stem, 3x3/2 max pool, four stages (64, 128, 256, 512 planes),
/// global average pooling, fc.
class TorchvisionResNetImpl : public ClassifierImpl {
 public:
  /// `depth` 18 (basic blocks 2-2-2-2) or 50 (bottlenecks 3-4-6-3); `in_channels` 3 for
  /// torchvision's shapes.
  TorchvisionResNetImpl(int depth, int64_t num_classes, int64_t in_channels = 3);
  torch::Tensor forward(torch::Tensor x) override;

  torch::nn::Conv2d conv1{nullptr};
  SyncBatchNorm bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(TorchvisionResNet);

/// Forward multiply-adds x 2 of one `side` x `side` image through ResNet-`depth`.
double torchvision_resnet_forward_flops(int depth, int64_t side, int64_t num_classes,
                                        int64_t in_channels = 3);

}  // namespace ddp::models
