#include "ddp/models/net.h"

#include "ddp/models/onednn_conv2d.h"
#include "ddp/models/onednn_max_pool2d.h"

namespace ddp::models {

NetImpl::NetImpl(int64_t in_channels, int64_t side, int64_t num_classes) {
  namespace nn = torch::nn;
  conv1 = register_module("conv1",
                          nn::Conv2d(nn::Conv2dOptions(in_channels, 64, 3).stride(1).padding(1)));
  conv2 = register_module("conv2", nn::Conv2d(nn::Conv2dOptions(64, 128, 3).stride(1).padding(1)));
  const int64_t pooled = side / 4;  // two 2x2 max-pools
  fc = register_module("fc", nn::Linear(128 * pooled * pooled, num_classes));
  conv2_algorithm_ = onednn_conv2d_available(64, 128, ConvAlgorithm::kWinograd)
                         ? ConvAlgorithm::kWinograd
                         : ConvAlgorithm::kDirect;
  const torch::Tensor image = torch::zeros({1, in_channels, side, side});
  const torch::Tensor conv2_input = torch::zeros({1, 64 / 16, side / 2, side / 2, 16});
  blocked_ =
      onednn_conv2d_blocked_applies(image, conv1->weight, conv1->bias, ConvAlgorithm::kDirect) &&
      onednn_conv2d_blocked_applies(conv2_input, conv2->weight, conv2->bias, conv2_algorithm_);
}

torch::Tensor NetImpl::forward(torch::Tensor x) {
  if (blocked_ &&
      onednn_conv2d_blocked_applies(x, conv1->weight, conv1->bias, ConvAlgorithm::kDirect)) {
    return forward_blocked(x);
  }
  // The same function as Python's Net, computed faster (bench/compare.sh measures it):
  // - channels-last: oneDNN's convolutions and max-pools are much faster on NHWC than on NCHW
  //   (max-pool ~7x on one thread), and flatten() below still yields Python's (C, H, W) order;
  // - the convolutions through oneDNN's own API (models/onednn_conv2d.h): conv2 by Winograd
  //   where this CPU has the kernels, conv1 direct in oneDNN's own layouts;
  // - pool before relu: max and relu commute exactly (relu is monotone), so the outputs and the
  //   gradients are the same bits, but relu and its backward touch a quarter of the elements.
  x = x.contiguous(torch::MemoryFormat::ChannelsLast);
  x = onednn_conv2d(x, conv1->weight, conv1->bias, ConvAlgorithm::kDirect);
  x = torch::relu(torch::max_pool2d(x, 2, 2));
  x = onednn_conv2d(x, conv2->weight, conv2->bias, conv2_algorithm_);
  x = torch::relu(torch::max_pool2d(x, 2, 2));
  return fc->forward(torch::flatten(x, 1));
}

torch::Tensor NetImpl::forward_blocked(const torch::Tensor& images) {
  // forward()'s function with the activations in oneDNN's blocked layout from conv1's output to
  // the flatten: no reorders between the convolutions and LibTorch's ops (a tenth of a step);
  // oneDNN's max-pool and LibTorch's relu read blocked tensors as they are.
  torch::Tensor x =
      onednn_conv2d_blocked(images, conv1->weight, conv1->bias, ConvAlgorithm::kDirect);
  x = torch::relu(blocked_max_pool2d(x));
  x = onednn_conv2d_blocked(x, conv2->weight, conv2->bias, conv2_algorithm_);
  x = torch::relu(blocked_max_pool2d(x));
  return fc->forward(torch::flatten(from_blocked(x), 1));
}

double net_forward_flops(int64_t in_channels, int64_t side, int64_t num_classes) {
  const double s2 = double(side * side);
  const double conv1 = 2.0 * s2 * 64 * in_channels * 9;
  const double conv2 = 2.0 * (s2 / 4) * 128 * 64 * 9;
  const double fc = 2.0 * 128 * (s2 / 16) * num_classes;
  return conv1 + conv2 + fc;
}

}  // namespace ddp::models
