// 3x3, stride-1, padding-1 convolutions through oneDNN's own API, forward and both backward
// passes, in the layouts oneDNN prefers. LibTorch (1.13 and 2.x) reaches oneDNN only for direct
// convolutions on its own layouts; called directly, oneDNN also has Winograd F(4x4, 3x3) kernels,
// which on AVX-512 compute the same convolution with 2.25x fewer multiplications, and its blocked
// layout, in which Net's conv1 weight gradient is much faster (docs/performance.md has the
// figures). Winograd rounds differently from a direct sum, by ~1e-6 relative
// (onednn_conv2d_test.cpp bounds it). oneDNN runs a pass only where it has a jit kernel for this
// CPU; where it would fall back to its reference loop (~1,000x slower), LibTorch computes instead.
#pragma once

#include <string>

#include <torch/torch.h>

namespace ddp::models {

enum class ConvAlgorithm {
  kDirect,    ///< the sum as written, oneDNN's fastest kernels for it
  kWinograd,  ///< Winograd F(4x4, 3x3): channel counts multiples of 16, AVX-512
};

/// Whether onednn_conv2d() computes a convolution of `in_channels` to `out_channels` channels
/// with `algorithm` here, forward and backward: ddp.cpp was built with oneDNN 2.x (Debian's
/// libdnnl-dev), and oneDNN has jit kernels for this CPU and shape.
bool onednn_conv2d_available(int64_t in_channels, int64_t out_channels, ConvAlgorithm algorithm);

/// torch::conv2d(input, weight, bias, /*stride=*/1, /*padding=*/1) for a [out, in, 3, 3]
/// weight, differentiable in all three; by oneDNN with `algorithm` for fp32 CPU tensors where
/// it has jit kernels for the forward pass and each gradient autograd needs, by torch::conv2d
/// otherwise (another dtype or device, autocast on, no such kernels). The output has the input's
/// memory format (channels-last or contiguous).
torch::Tensor onednn_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias, ConvAlgorithm algorithm);

/// What computes onednn_conv2d() (or, with `blocked_output`, onednn_conv2d_blocked()) of these
/// tensors here, for a report: "oneDNN jit:avx2 direct", "oneDNN jit_wino_4x3:avx512_core
/// Winograd", or "LibTorch (why not oneDNN)".
std::string onednn_conv2d_kernel(const torch::Tensor& input, const torch::Tensor& weight,
                                 const torch::Tensor& bias, ConvAlgorithm algorithm,
                                 bool blocked_output);

/// Blocked activations: oneDNN's own layout nChw16c or nChw8c, held as a dense 5-d torch tensor
/// [N, C/B, H, W, B] (element (n, c, h, w) at [n][c/B][h][w][c%B]). A network that keeps its
/// activations blocked between convolutions saves two reorders per convolution and pass (for
/// Net, a tenth of a step); elementwise ops work on them as they are.
///
/// B, the channels per block here: the block of oneDNN's jit kernels for this CPU, 16 with
/// AVX-512 and 8 with AVX2 or SSE4.1 (a blocked tensor of the other size gets only oneDNN's
/// reference loop); 16 in a build without oneDNN 2.x.
int64_t blocked_channels();

/// The 4-d activation `x` (C a multiple of blocked_channels()) as a blocked tensor;
/// differentiable.
torch::Tensor to_blocked(const torch::Tensor& x);

/// The 4-d [N, C, H, W] activation a blocked tensor (B 8 or 16) holds, as a contiguous copy;
/// differentiable.
torch::Tensor from_blocked(const torch::Tensor& x);

/// The convolution of onednn_conv2d() with a blocked output (blocks of blocked_channels(), which
/// must divide the output channels). The input is 4-d (contiguous or channels-last) or blocked;
/// its gradient comes in the input's layout. By oneDNN where onednn_conv2d_blocked_applies(),
/// else by torch::conv2d between conversions from and to the blocked layout.
torch::Tensor onednn_conv2d_blocked(const torch::Tensor& input, const torch::Tensor& weight,
                                    const torch::Tensor& bias, ConvAlgorithm algorithm);

/// Whether oneDNN computes onednn_conv2d_blocked() on these tensors: fp32 CPU tensors, autocast
/// off, oneDNN 2.x with jit kernels for the passes autograd needs, output channels a multiple of
/// blocked_channels().
bool onednn_conv2d_blocked_applies(const torch::Tensor& input, const torch::Tensor& weight,
                                   const torch::Tensor& bias, ConvAlgorithm algorithm);

}  // namespace ddp::models
