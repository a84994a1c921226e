#include "ddp/models/net.h"

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
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
  choose_path(in_channels, side);
}

void NetImpl::choose_path(int64_t in_channels, int64_t side) {
  // Each layer's input as training sees it (conv2's needs its gradient), for a batch of the
  // reference program's 64: oneDNN may choose its kernels by the batch size too, and a forward
  // of another size still checks its own (the layers fall back to LibTorch per call).
  const int64_t n = 64, block = blocked_channels();
  const torch::Tensor image = torch::empty({n, in_channels, side, side});
  const torch::Tensor conv1_blocked = torch::empty({n, 64 / block, side, side, block});
  const torch::Tensor conv2_blocked =
      torch::empty({n, 64 / block, side / 2, side / 2, block}).requires_grad_();
  const torch::Tensor conv2_output = torch::empty({n, 128 / block, side / 2, side / 2, block});
  blocked_ =
      onednn_conv2d_blocked_applies(image, conv1->weight, conv1->bias, ConvAlgorithm::kDirect) &&
      onednn_conv2d_blocked_applies(conv2_blocked, conv2->weight, conv2->bias, conv2_algorithm_);
  if (blocked_) {
    kernels_ = c10::str(
        "conv1: ",
        onednn_conv2d_kernel(image, conv1->weight, conv1->bias, ConvAlgorithm::kDirect, true),
        "; pool1: ", blocked_max_pool2d_kernel(conv1_blocked), "; conv2: ",
        onednn_conv2d_kernel(conv2_blocked, conv2->weight, conv2->bias, conv2_algorithm_, true),
        "; pool2: ", blocked_max_pool2d_kernel(conv2_output), " (activations in blocks of ", block,
        " channels)");
    return;
  }
  const auto channels_last = [](torch::Tensor t) {
    return t.contiguous(torch::MemoryFormat::ChannelsLast);
  };
  const torch::Tensor conv2_input =
      channels_last(torch::empty({n, 64, side / 2, side / 2})).requires_grad_();
  kernels_ = c10::str(
      "conv1: ",
      onednn_conv2d_kernel(channels_last(image), conv1->weight, conv1->bias, ConvAlgorithm::kDirect,
                           false),
      "; conv2: ",
      onednn_conv2d_kernel(conv2_input, conv2->weight, conv2->bias, conv2_algorithm_, false),
      "; pools: LibTorch (channels-last)");
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
