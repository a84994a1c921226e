#include "ddp/models/torchvision_resnet.h"

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(false));
}

// torchvision's downsample: conv1x1 with the block's stride, then batch norm ("0", "1").
nn::Sequential downsample_if_needed(int64_t inplanes, int64_t out, int64_t stride) {
  if (stride == 1 && inplanes == out) return nullptr;
  return nn::Sequential(conv(inplanes, out, 1, stride, 0), SyncBatchNorm(out));
}

struct Layout {
  bool bottleneck;
  std::array<int64_t, 4> blocks;
};

Layout layout_of(int depth) {
  if (depth == 18) return {false, {2, 2, 2, 2}};
  if (depth == 50) return {true, {3, 4, 6, 3}};
  throw InvalidArgument(c10::str("ResNet-", depth, ": only resnet18 and resnet50 are built"));
}

}  // namespace

ResNetBasicBlockImpl::ResNetBasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv(inplanes, planes, 3, stride, 1));
  bn1 = register_module("bn1", SyncBatchNorm(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1, 1));
  bn2 = register_module("bn2", SyncBatchNorm(planes));
  downsample = downsample_if_needed(inplanes, planes, stride);
  if (downsample) register_module("downsample", downsample);
}

torch::Tensor ResNetBasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  return torch::relu(out + (downsample ? downsample->forward(x) : x));
}

ResNetBottleneckImpl::ResNetBottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv(inplanes, planes, 1, 1, 0));
  bn1 = register_module("bn1", SyncBatchNorm(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride, 1));
  bn2 = register_module("bn2", SyncBatchNorm(planes));
  conv3 = register_module("conv3", conv(planes, planes * 4, 1, 1, 0));
  bn3 = register_module("bn3", SyncBatchNorm(planes * 4));
  downsample = downsample_if_needed(inplanes, planes * 4, stride);
  if (downsample) register_module("downsample", downsample);
}

torch::Tensor ResNetBottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = torch::relu(bn2(conv2(out)));
  out = bn3(conv3(out));
  return torch::relu(out + (downsample ? downsample->forward(x) : x));
}

TorchvisionResNetImpl::TorchvisionResNetImpl(int depth, int64_t num_classes, int64_t in_channels) {
  const Layout layout = layout_of(depth);
  const int64_t expansion = layout.bottleneck ? 4 : 1;
  conv1 = register_module("conv1", conv(in_channels, 64, 7, 2, 3));
  bn1 = register_module("bn1", SyncBatchNorm(64));
  int64_t inplanes = 64;
  auto stage = [&](int64_t planes, int64_t blocks, int64_t stride) {
    nn::Sequential seq;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t s = b == 0 ? stride : 1;
      if (layout.bottleneck) {
        seq->push_back(ResNetBottleneck(inplanes, planes, s));
      } else {
        seq->push_back(ResNetBasicBlock(inplanes, planes, s));
      }
      inplanes = planes * expansion;
    }
    return seq;
  };
  layer1 = register_module("layer1", stage(64, layout.blocks[0], 1));
  layer2 = register_module("layer2", stage(128, layout.blocks[1], 2));
  layer3 = register_module("layer3", stage(256, layout.blocks[2], 2));
  layer4 = register_module("layer4", stage(512, layout.blocks[3], 2));
  fc = register_module("fc", nn::Linear(512 * expansion, num_classes));
  // torchvision's initialisation: He normal (fan out) for the convolutions; batch norms start at
  // weight 1, bias 0 (their default); fc keeps Linear's default, as in torchvision.
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = dynamic_cast<nn::Conv2dImpl*>(m.get())) {
      nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
    }
  }
}

torch::Tensor TorchvisionResNetImpl::forward(torch::Tensor x) {
  x = torch::relu(bn1(conv1(x)));
  x = torch::max_pool2d(x, 3, 2, 1);
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc(x);
}

double torchvision_resnet_forward_flops(int depth, int64_t side, int64_t num_classes,
                                        int64_t in_channels) {
  const Layout layout = layout_of(depth);
  auto conv_flops = [](double pixels, int64_t in, int64_t out, int64_t k) {
    return 2.0 * pixels * double(in * out * k * k);
  };
  int64_t s = (side + 1) / 2;  // conv1, stride 2
  double flops = conv_flops(double(s * s), in_channels, 64, 7);
  s = (s + 1) / 2;  // max pool
  int64_t inplanes = 64;
  const int64_t expansion = layout.bottleneck ? 4 : 1;
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = 64 << stage;
    for (int64_t b = 0; b < layout.blocks[size_t(stage)]; ++b) {
      const int64_t in_side = s;
      if (b == 0 && stage > 0) s = (s + 1) / 2;
      const double out_px = double(s * s), in_px = double(in_side * in_side);
      if (layout.bottleneck) {
        flops += conv_flops(in_px, inplanes, planes, 1) + conv_flops(out_px, planes, planes, 3) +
                 conv_flops(out_px, planes, planes * 4, 1);
      } else {
        flops += conv_flops(out_px, inplanes, planes, 3) + conv_flops(out_px, planes, planes, 3);
      }
      if (b == 0 && (stage > 0 || inplanes != planes * expansion)) {
        flops += conv_flops(out_px, inplanes, planes * expansion, 1);
      }
      inplanes = planes * expansion;
    }
  }
  return flops + 2.0 * double(inplanes * num_classes);
}

}  // namespace ddp::models
