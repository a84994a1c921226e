// 3x3, stride-1, padding-1 convolutions through oneDNN's own API, forward and both backward
// passes, in the layouts oneDNN prefers. LibTorch (1.13 and 2.x) reaches oneDNN only for direct
// convolutions on its own layouts; called directly, oneDNN also has Winograd F(4x4, 3x3) kernels,
// which on AVX-512 compute the same convolution with 2.25x fewer multiplications, and its blocked
// layout, in which Net's conv1 weight gradient is much faster (docs/performance.md has the
// figures). Winograd rounds differently from a direct sum, by ~1e-6 relative
// (onednn_conv2d_test.cpp bounds it).
#pragma once

#include <torch/torch.h>

namespace ddp::models {

enum class ConvAlgorithm {
  kDirect,    ///< the sum as written, oneDNN's fastest kernels for it
  kWinograd,  ///< Winograd F(4x4, 3x3): channel counts multiples of 16, AVX-512
};

/// Whether onednn_conv2d() computes a convolution of `in_channels` to `out_channels` channels
/// with `algorithm` here: ddp.cpp was built with oneDNN 2.x (Debian's libdnnl-dev), and oneDNN
/// has such kernels for this CPU and shape.
bool onednn_conv2d_available(int64_t in_channels, int64_t out_channels, ConvAlgorithm algorithm);

/// torch::conv2d(input, weight, bias, /*stride=*/1, /*padding=*/1) for a [out, in, 3, 3]
/// weight, differentiable in all three; by oneDNN with `algorithm` for fp32 CPU tensors where
/// available, by torch::conv2d otherwise (another dtype or device, autocast on, no kernels). The
/// output has the input's memory format (channels-last or contiguous).
torch::Tensor onednn_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias, ConvAlgorithm algorithm);

/// Blocked activations: oneDNN's own layout nChw16c, held as a dense 5-d torch tensor
/// [N, C/16, H, W, 16] (element (n, c, h, w) at [n][c/16][h][w][c%16]). A network that keeps
/// its activations blocked between convolutions saves two reorders per convolution and pass
/// (for Net, a tenth of a step); elementwise ops work on them as they are.
///
/// The 4-d activation `x` (C a multiple of 16) as a blocked tensor; differentiable.
torch::Tensor to_blocked(const torch::Tensor& x);

/// The 4-d [N, C, H, W] activation a blocked tensor holds, as a contiguous copy; differentiable.
torch::Tensor from_blocked(const torch::Tensor& x);

/// The convolution of onednn_conv2d() with a blocked output. The input is 4-d (contiguous or
/// channels-last) or blocked; its gradient comes in the input's layout. Only where
/// onednn_conv2d_blocked_applies() (throws otherwise).
torch::Tensor onednn_conv2d_blocked(const torch::Tensor& input, const torch::Tensor& weight,
                                    const torch::Tensor& bias, ConvAlgorithm algorithm);

/// Whether onednn_conv2d_blocked() runs on these tensors: fp32 CPU tensors, autocast off, oneDNN
/// 2.x with such kernels, output channels a multiple of 16.
bool onednn_conv2d_blocked_applies(const torch::Tensor& input, const torch::Tensor& weight,
                                   const torch::Tensor& bias, ConvAlgorithm algorithm);

}  // namespace ddp::models
