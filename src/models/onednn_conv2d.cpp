#include "ddp/models/onednn_conv2d.h"

#include <string>
#include <tuple>
#include <utility>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

#include "models/onednn_support.h"
#include "torch_compat.h"

namespace ddp::models {
namespace {

torch::Tensor direct_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias) {
  return torch::conv2d(input, weight, bias, /*stride=*/1, /*padding=*/1);
}

}  // namespace

torch::Tensor to_blocked(const torch::Tensor& x) {
  const int64_t block = blocked_channels();
  TORCH_CHECK(x.dim() == 4 && x.size(1) % block == 0, "to_blocked: expected [N, C, H, W] with C a ",
              "multiple of ", block, " (this CPU's block), got ", x.sizes());
  return x.reshape({x.size(0), x.size(1) / block, block, x.size(2), x.size(3)})
      .permute({0, 1, 3, 4, 2})
      .contiguous();
}

torch::Tensor from_blocked(const torch::Tensor& x) {
  TORCH_CHECK(onednn::is_blocked_activation(x),
              "from_blocked: expected a blocked activation [N, C/B, H, W, B], B 8 or 16, got ",
              x.sizes());
  return x.permute({0, 1, 4, 2, 3})
      .reshape({x.size(0), x.size(1) * x.size(4), x.size(2), x.size(3)});
}

namespace {

// onednn_conv2d_blocked()'s function by LibTorch: the blocked input unblocked, the output blocked.
torch::Tensor libtorch_conv2d_blocked(const torch::Tensor& input, const torch::Tensor& weight,
                                      const torch::Tensor& bias) {
  const torch::Tensor x = input.dim() == 5 ? from_blocked(input) : input;
  return to_blocked(direct_conv2d(x, weight, bias).contiguous());
}

}  // namespace

#if defined(DDP_ONEDNN_LAYERS)
namespace {

using namespace onednn;

// The three primitives of one problem shape and algorithm, each made only where it runs a jit
// kernel: a pass that would get oneDNN's reference loop is not available (ok false).
struct Primitives {
  bool forward_ok = false, backward_data_ok = false, backward_weights_ok = false;
  dnnl::convolution_forward::primitive_desc forward_pd;
  dnnl::convolution_backward_data::primitive_desc backward_data_pd;
  dnnl::convolution_backward_weights::primitive_desc backward_weights_pd;
  dnnl::convolution_forward forward;
  dnnl::convolution_backward_data backward_data;
  dnnl::convolution_backward_weights backward_weights;
};

// N, C, K, H, W, the input's layout and the output's.
using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, Layout, Layout>;

Primitives make_primitives(const Shape& shape, ConvAlgorithm algorithm) {
  const auto [n, c, k, h, w, in_layout, out_layout] = shape;
  const memory::dims src{n, c, h, w}, weights{k, c, 3, 3}, dst{n, k, h, w}, stride{1, 1}, pad{1, 1};
  // Layouts left to oneDNN (blocked ones); the bias is a plain vector.
  const auto any = [](const memory::dims& dims) { return memory::desc(dims, kF32, Tag::any); };
  // A direct forward reads and writes channels-last tensors as they are: oneDNN's blocked
  // output would cost a reorder that takes longer than the convolution itself.
  const bool nhwc = algorithm == ConvAlgorithm::kDirect && in_layout == Layout::kChannelsLast &&
                    out_layout == Layout::kChannelsLast;
  // Blocked tensors are read and written as they are, whichever the algorithm.
  const auto io = [&](const memory::dims& dims, Layout layout) {
    if (layout == Layout::kBlocked) return blocked_desc(dims);
    return nhwc ? memory::desc(dims, kF32, Tag::nhwc) : any(dims);
  };
  const memory::desc bias({k}, kF32, Tag::x);
  const auto alg = algorithm == ConvAlgorithm::kWinograd ? dnnl::algorithm::convolution_winograd
                                                         : dnnl::algorithm::convolution_direct;
  Primitives p;
  // oneDNN pads channels to 16 for Winograd rather than refuse, which is slower than direct.
  if (algorithm == ConvAlgorithm::kWinograd && (c % 16 != 0 || k % 16 != 0)) return p;
  // Blocked tensors hold whole blocks of channels only.
  const int64_t block = cpu_block_channels();
  if ((in_layout == Layout::kBlocked && c % block != 0) ||
      (out_layout == Layout::kBlocked && k % block != 0)) {
    return p;
  }
  // The backward passes read and write the gradients of blocked tensors blocked as well.
  const auto gradient = [&](const memory::dims& dims, Layout layout) {
    return layout == Layout::kBlocked ? blocked_desc(dims) : any(dims);
  };
  p.forward_ok = make_jit(p.forward_pd, [&] {
    return dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, io(src, in_layout),
                                        any(weights), bias, io(dst, out_layout), stride, pad, pad),
        attr(), cpu_engine());
  });
  if (!p.forward_ok) return p;
  p.forward = dnnl::convolution_forward(p.forward_pd);
  // Each backward pass on its own: a first layer needs no input gradient, which oneDNN often
  // has only as its reference loop (Net's conv1, blocked, on any CPU).
  p.backward_data_ok = make_jit(p.backward_data_pd, [&] {
    return dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(alg, gradient(src, in_layout), any(weights),
                                              gradient(dst, out_layout), stride, pad, pad),
        attr(), cpu_engine(), p.forward_pd);
  });
  if (p.backward_data_ok) p.backward_data = dnnl::convolution_backward_data(p.backward_data_pd);
  p.backward_weights_ok = make_jit(p.backward_weights_pd, [&] {
    return dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(alg, gradient(src, in_layout), any(weights), bias,
                                                 gradient(dst, out_layout), stride, pad, pad),
        attr(), cpu_engine(), p.forward_pd);
  });
  if (p.backward_weights_ok) {
    p.backward_weights = dnnl::convolution_backward_weights(p.backward_weights_pd);
  }
  return p;
}

const Primitives& primitives_for(const Shape& shape, ConvAlgorithm algorithm) {
  return built_once<Primitives>(std::make_pair(shape, algorithm), [](const auto& key) {
    return make_primitives(key.first, key.second);
  });
}

Shape shape_of(const torch::Tensor& input, const torch::Tensor& weight, Layout out_layout) {
  const memory::dims dims = dims_of(input);
  return {dims[0], dims[1], weight.size(0), dims[2], dims[3], layout_of(input), out_layout};
}

// Runs `compute` with its result in the layout `desc`, then copies it into `out` (a torch
// tensor) unless it was computed there.
template <class Compute>
void compute_into(const torch::Tensor& out, const memory::desc& desc, dnnl::stream& stream,
                  const Compute& compute) {
  const memory user = out.dim() == 1 ? wrap_vector(out) : wrap(out);
  torch::Tensor buffer;
  const memory result =
      user.get_desc() == desc
          ? user
          : memory(desc, cpu_engine(), (buffer = bytes(desc.get_size())).data_ptr());
  compute(result);
  if (result != user) reorder(result, user, stream);
}

// The autograd function: forward by the forward primitive, backward by the backward-data and
// backward-weights ones, each only when its gradient is needed. The output is in `out_layout`,
// the input's gradient in the input's layout.
struct OnednnConv2dFunction : torch::autograd::Function<OnednnConv2dFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               ConvAlgorithm algorithm, Layout out_layout) {
    const torch::Tensor x = dense(input), w = dense(weight), b = bias.contiguous();
    const Shape shape = shape_of(x, w, out_layout);
    const Primitives& p = primitives_for(shape, algorithm);
    const auto [n, c, k, h, width, ignored_in, ignored_out] = shape;
    torch::Tensor out = empty_activation({n, k, h, width}, out_layout, x.options());
    dnnl::stream stream(cpu_engine());
    torch::Tensor x_buffer, w_buffer;
    const memory src = in_layout(wrap(x), p.forward_pd.src_desc(), stream, x_buffer);
    const memory weights = in_layout(wrap(w), p.forward_pd.weights_desc(), stream, w_buffer);
    compute_into(out, p.forward_pd.dst_desc(), stream, [&](const memory& dst) {
      execute(p.forward, p.forward_pd, stream,
              {{DNNL_ARG_SRC, src},
               {DNNL_ARG_WEIGHTS, weights},
               {DNNL_ARG_BIAS, wrap_vector(b)},
               {DNNL_ARG_DST, dst}});
    });
    stream.wait();
    ctx->save_for_backward({x, w});
    ctx->saved_data["algorithm"] = int64_t(algorithm);
    ctx->saved_data["out_layout"] = int64_t(out_layout);
    // The input in oneDNN's layout, when it was reordered: backward-weights reads it again.
    if (x_buffer.defined()) ctx->saved_data["src_reordered"] = x_buffer;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const auto algorithm = ConvAlgorithm(ctx->saved_data["algorithm"].toInt());
    const auto out_layout = Layout(ctx->saved_data["out_layout"].toInt());
    const Primitives& p = primitives_for(shape_of(x, w, out_layout), algorithm);
    const torch::Tensor grad_out = as_layout(grads[0], out_layout);
    dnnl::stream stream(cpu_engine());
    torch::Tensor grad_input, grad_weight, grad_bias;
    torch::Tensor dy_buffer, w_buffer, x_buffer, dy_weights_buffer;
    // The output's gradient, in the layout of the last pass that read it.
    memory dy = wrap(grad_out);
    // forward() ran only where each pass needed has a jit kernel (usable()).
    TORCH_INTERNAL_ASSERT(!ctx->needs_input_grad(0) || p.backward_data_ok);
    TORCH_INTERNAL_ASSERT(!(ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) ||
                          p.backward_weights_ok);
    if (ctx->needs_input_grad(0)) {
      dy = in_layout(dy, p.backward_data_pd.diff_dst_desc(), stream, dy_buffer);
      grad_input = torch::empty_like(x);
      const memory weights =
          in_layout(wrap(w), p.backward_data_pd.weights_desc(), stream, w_buffer);
      compute_into(grad_input, p.backward_data_pd.diff_src_desc(), stream, [&](const memory& dx) {
        execute(p.backward_data, p.backward_data_pd, stream,
                {{DNNL_ARG_DIFF_DST, dy}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, dx}});
      });
    }
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {
      grad_weight = torch::empty_like(w);
      grad_bias = torch::empty({w.size(0)}, w.options());
      const auto reordered = ctx->saved_data.find("src_reordered");
      const bool reuse = reordered != ctx->saved_data.end() &&
                         p.backward_weights_pd.src_desc() == p.forward_pd.src_desc();
      const memory src =
          reuse ? memory(p.forward_pd.src_desc(), cpu_engine(),
                         reordered->second.toTensor().data_ptr())
                : in_layout(wrap(x), p.backward_weights_pd.src_desc(), stream, x_buffer);
      const memory dy_weights =
          in_layout(dy, p.backward_weights_pd.diff_dst_desc(), stream, dy_weights_buffer);
      compute_into(grad_weight, p.backward_weights_pd.diff_weights_desc(), stream,
                   [&](const memory& dw) {
                     execute(p.backward_weights, p.backward_weights_pd, stream,
                             {{DNNL_ARG_SRC, src},
                              {DNNL_ARG_DIFF_DST, dy_weights},
                              {DNNL_ARG_DIFF_WEIGHTS, dw},
                              {DNNL_ARG_DIFF_BIAS, wrap_vector(grad_bias)}});
                   });
    }
    stream.wait();
    return {grad_input, grad_weight, grad_bias, torch::Tensor(), torch::Tensor()};
  }
};

// Why oneDNN does not compute this convolution here, with its output in `out_layout` (then
// LibTorch does); empty where it does. It needs a jit kernel for the forward pass and for each
// backward pass that autograd will ask for.
std::string why_not_onednn(const torch::Tensor& input, const torch::Tensor& weight,
                           const torch::Tensor& bias, ConvAlgorithm algorithm, Layout out_layout) {
  const auto fp32_cpu = [](const torch::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat;
  };
  if (!fp32_cpu(input) || !fp32_cpu(weight) || !fp32_cpu(bias)) return "not fp32 on the CPU";
  if (compat::autocast_enabled(c10::DeviceType::CPU)) return "under autocast";
  const bool activation = input.dim() == 4 || is_blocked_activation(input);
  if (!activation || weight.dim() != 4 || weight.size(2) != 3 || weight.size(3) != 3 ||
      dims_of(input)[1] != weight.size(1) || bias.numel() != weight.size(0)) {
    return "not a 3x3 convolution of this input";
  }
  if (input.dim() == 5 && input.size(4) != cpu_block_channels()) {
    return c10::str("the input is blocked by ", input.size(4), ", this CPU's kernels by ",
                    cpu_block_channels());
  }
  const Primitives& p = primitives_for(shape_of(input, weight, out_layout), algorithm);
  const bool grad = torch::GradMode::is_enabled();
  const bool needs_data = grad && input.requires_grad();
  const bool needs_weights = grad && (weight.requires_grad() || bias.requires_grad());
  if (!p.forward_ok || (needs_data && !p.backward_data_ok) ||
      (needs_weights && !p.backward_weights_ok)) {
    return "oneDNN has no jit kernel for this CPU";
  }
  return "";
}

bool usable(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
            ConvAlgorithm algorithm, Layout out_layout) {
  return why_not_onednn(input, weight, bias, algorithm, out_layout).empty();
}

// "oneDNN jit:avx2 direct", naming a backward pass's kernel too where it is another.
std::string onednn_kernel(const Primitives& p, ConvAlgorithm algorithm) {
  const std::string forward = p.forward_pd.impl_info_str();
  std::string text =
      c10::str("oneDNN ", forward, algorithm == ConvAlgorithm::kWinograd ? " Winograd" : " direct");
  if (p.backward_weights_ok && p.backward_weights_pd.impl_info_str() != forward) {
    text += c10::str(" (backward ", p.backward_weights_pd.impl_info_str(), ")");
  }
  return text;
}

}  // namespace

int64_t blocked_channels() { return cpu_block_channels(); }

bool onednn_conv2d_available(int64_t in_channels, int64_t out_channels, ConvAlgorithm algorithm) {
  const Primitives& p = primitives_for(
      {1, in_channels, out_channels, 8, 8, Layout::kChannelsLast, Layout::kChannelsLast},
      algorithm);
  return p.forward_ok && p.backward_data_ok && p.backward_weights_ok;
}

std::string onednn_conv2d_kernel(const torch::Tensor& input, const torch::Tensor& weight,
                                 const torch::Tensor& bias, ConvAlgorithm algorithm,
                                 bool blocked_output) {
  if (!blocked_output && input.dim() != 4) return "LibTorch (not a 4-d activation)";
  const Layout out_layout = blocked_output ? Layout::kBlocked : layout_of(input);
  const std::string why_not = why_not_onednn(input, weight, bias, algorithm, out_layout);
  if (!why_not.empty()) return c10::str("LibTorch (", why_not, ")");
  return onednn_kernel(primitives_for(shape_of(input, weight, out_layout), algorithm), algorithm);
}

torch::Tensor onednn_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias, ConvAlgorithm algorithm) {
  const Layout layout = layout_of(input);  // the layout dense(input) has, without its copy
  if (input.dim() != 4 || !usable(input, weight, bias, algorithm, layout)) {
    return direct_conv2d(input, weight, bias);
  }
  return OnednnConv2dFunction::apply(input, weight, bias, algorithm, layout);
}

bool onednn_conv2d_blocked_applies(const torch::Tensor& input, const torch::Tensor& weight,
                                   const torch::Tensor& bias, ConvAlgorithm algorithm) {
  return usable(input, weight, bias, algorithm, Layout::kBlocked);
}

torch::Tensor onednn_conv2d_blocked(const torch::Tensor& input, const torch::Tensor& weight,
                                    const torch::Tensor& bias, ConvAlgorithm algorithm) {
  if (!onednn_conv2d_blocked_applies(input, weight, bias, algorithm)) {
    return libtorch_conv2d_blocked(input, weight, bias);
  }
  return OnednnConv2dFunction::apply(input, weight, bias, algorithm, Layout::kBlocked);
}

#else  // no oneDNN 2.x: LibTorch's convolutions only

int64_t blocked_channels() { return 16; }

bool onednn_conv2d_available(int64_t, int64_t, ConvAlgorithm) { return false; }

std::string onednn_conv2d_kernel(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                 ConvAlgorithm, bool) {
  return "LibTorch (ddp.cpp was built without oneDNN 2.x)";
}

torch::Tensor onednn_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias, ConvAlgorithm) {
  return direct_conv2d(input, weight, bias);
}

bool onednn_conv2d_blocked_applies(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                   ConvAlgorithm) {
  return false;
}

torch::Tensor onednn_conv2d_blocked(const torch::Tensor& input, const torch::Tensor& weight,
                                    const torch::Tensor& bias, ConvAlgorithm) {
  return libtorch_conv2d_blocked(input, weight, bias);
}

#endif

}  // namespace ddp::models
