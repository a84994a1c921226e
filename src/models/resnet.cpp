#include "ddp/models/resnet.h"

namespace ddp::models {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride) {
  conv1 = register_module("conv1", conv(in_channels, out_channels, 3, stride));
  bn1 = register_module("bn1", SyncBatchNorm(out_channels));
  conv2 = register_module("conv2", conv(out_channels, out_channels, 3, 1));
  bn2 = register_module("bn2", SyncBatchNorm(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    shortcut_conv = register_module("shortcut_conv", conv(in_channels, out_channels, 1, stride));
    shortcut_bn = register_module("shortcut_bn", SyncBatchNorm(out_channels));
  }
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  const torch::Tensor identity = shortcut_conv ? shortcut_bn(shortcut_conv(x)) : x;
  return torch::relu(out + identity);
}

ResNetImpl::ResNetImpl(int64_t in_channels, int64_t num_classes, int64_t blocks_per_stage,
                       int64_t width) {
  const int64_t w1 = 16 * width, w2 = 32 * width, w3 = 64 * width;
  conv1 = register_module("conv1", conv(in_channels, w1, 3, 1));
  bn1 = register_module("bn1", SyncBatchNorm(w1));
  auto stage = [&](int64_t in, int64_t out, int64_t stride) {
    nn::Sequential seq;
    for (int64_t b = 0; b < blocks_per_stage; ++b) {
      seq->push_back(BasicBlock(b == 0 ? in : out, out, b == 0 ? stride : 1));
    }
    return seq;
  };
  layer1 = register_module("layer1", stage(w1, w1, 1));
  layer2 = register_module("layer2", stage(w1, w2, 2));
  layer3 = register_module("layer3", stage(w2, w3, 2));
  fc = register_module("fc", nn::Linear(w3, num_classes));
  for (auto& m : modules(/*include_self=*/false)) {
    if (auto* c = dynamic_cast<nn::Conv2dImpl*>(m.get())) {
      nn::init::kaiming_normal_(c->weight, 0, torch::kFanOut, torch::kReLU);
    }
  }
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = torch::relu(bn1(conv1(x)));
  x = layer3->forward(layer2->forward(layer1->forward(x)));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc(x);
}

double resnet_forward_flops(int64_t in_channels, int64_t side, int64_t num_classes,
                            int64_t blocks_per_stage, int64_t width) {
  auto conv_flops = [](double pixels, int64_t in, int64_t out, int64_t k) {
    return 2.0 * pixels * double(in * out * k * k);
  };
  const int64_t w[3] = {16 * width, 32 * width, 64 * width};
  double pixels = double(side * side);
  double flops = conv_flops(pixels, in_channels, w[0], 3);
  int64_t in = w[0];
  for (int s = 0; s < 3; ++s) {
    for (int64_t b = 0; b < blocks_per_stage; ++b) {
      const bool down = b == 0 && s > 0;
      const double out_pixels = down ? pixels / 4 : pixels;
      flops += conv_flops(out_pixels, in, w[s], 3) + conv_flops(out_pixels, w[s], w[s], 3);
      if (in != w[s] || down) flops += conv_flops(out_pixels, in, w[s], 1);
      pixels = out_pixels;
      in = w[s];
    }
  }
  return flops + 2.0 * double(w[2] * num_classes);
}

}  // namespace ddp::models
