// 2x2, stride-2 max-pooling of blocked activations (onednn_conv2d.h), forward and backward by
// oneDNN's pooling primitives, which read and write the blocked layout as it is. LibTorch's
// channels-last max-pool on a view of the same tensor computes the same values, more slowly:
// about half the speed on Net's conv1 output with LibTorch 1.13 (AMD Zen 5), and 3.5% of
// the trainer's images/s with 2.14 (Intel Xeon, 5 turns). It is the fallback without oneDNN 2.x
// and for other dtypes: bf16 too, where oneDNN 2.6's pooling cost 3% of the images/s; and where
// oneDNN has no jit kernel for the CPU and the block size.
#pragma once

#include <string>

#include <torch/torch.h>

namespace ddp::models {

/// torch::max_pool2d(x, 2, 2) of the activation the blocked tensor `x` ([N, C/B, H, W, B], B 8
/// or 16) holds, as a blocked tensor [N, C/B, H/2, W/2, B]; differentiable. fp32 CPU tensors
/// through oneDNN where it has jit kernels; any other by LibTorch.
torch::Tensor blocked_max_pool2d(const torch::Tensor& x);

/// What computes blocked_max_pool2d(x) here, for a report: "oneDNN jit:avx2", or "LibTorch (why
/// not oneDNN)".
std::string blocked_max_pool2d_kernel(const torch::Tensor& x);

}  // namespace ddp::models
