#include "ddp/models/onednn_conv2d.h"

#include <tuple>
#include <utility>

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
  TORCH_CHECK(x.dim() == 4 && x.size(1) % 16 == 0,
              "to_blocked: expected [N, C, H, W] with C a multiple of 16, got ", x.sizes());
  return x.reshape({x.size(0), x.size(1) / 16, 16, x.size(2), x.size(3)})
      .permute({0, 1, 3, 4, 2})
      .contiguous();
}

torch::Tensor from_blocked(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 5 && x.size(4) == 16,
              "from_blocked: expected a blocked activation [N, C/16, H, W, 16], got ", x.sizes());
  return x.permute({0, 1, 4, 2, 3}).reshape({x.size(0), x.size(1) * 16, x.size(2), x.size(3)});
}

#if defined(DDP_ONEDNN_LAYERS)
namespace {

using namespace onednn;

// The three primitives of one problem shape and algorithm, or none (ok false: no kernels).
struct Primitives {
  bool ok = false;
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
  const auto blocked = [](const memory::dims& dims) {
    return memory::desc(dims, kF32, Tag::nChw16c);
  };
  // A direct forward reads and writes channels-last tensors as they are: oneDNN's blocked
  // output would cost a reorder that takes longer than the convolution itself.
  const bool nhwc = algorithm == ConvAlgorithm::kDirect && in_layout == Layout::kChannelsLast &&
                    out_layout == Layout::kChannelsLast;
  // Blocked tensors are read and written as they are, whichever the algorithm.
  const auto io = [&](const memory::dims& dims, Layout layout) {
    if (layout == Layout::kBlocked) return blocked(dims);
    return nhwc ? memory::desc(dims, kF32, Tag::nhwc) : any(dims);
  };
  const memory::desc bias({k}, kF32, Tag::x);
  const auto alg = algorithm == ConvAlgorithm::kWinograd ? dnnl::algorithm::convolution_winograd
                                                         : dnnl::algorithm::convolution_direct;
  Primitives p;
  // oneDNN pads channels to 16 for Winograd rather than refuse, which is slower than direct.
  if (algorithm == ConvAlgorithm::kWinograd && (c % 16 != 0 || k % 16 != 0)) return p;
  // Blocked tensors hold whole blocks of 16 channels only.
  if ((in_layout == Layout::kBlocked && c % 16 != 0) ||
      (out_layout == Layout::kBlocked && k % 16 != 0)) {
    return p;
  }
  // The backward passes read and write the gradients of blocked tensors blocked as well.
  const auto gradient = [&](const memory::dims& dims, Layout layout) {
    return layout == Layout::kBlocked ? blocked(dims) : any(dims);
  };
  try {
    p.forward_pd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, io(src, in_layout),
                                        any(weights), bias, io(dst, out_layout), stride, pad, pad),
        attr(), cpu_engine());
    p.backward_data_pd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(alg, gradient(src, in_layout), any(weights),
                                              gradient(dst, out_layout), stride, pad, pad),
        attr(), cpu_engine(), p.forward_pd);
    p.backward_weights_pd = dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(alg, gradient(src, in_layout), any(weights), bias,
                                                 gradient(dst, out_layout), stride, pad, pad),
        attr(), cpu_engine(), p.forward_pd);
  } catch (const dnnl::error&) {
    return p;  // unimplemented: no such kernels for this CPU or shape
  }
  p.forward = dnnl::convolution_forward(p.forward_pd);
  p.backward_data = dnnl::convolution_backward_data(p.backward_data_pd);
  p.backward_weights = dnnl::convolution_backward_weights(p.backward_weights_pd);
  p.ok = true;
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
    const memory dy =
        in_layout(wrap(grad_out), p.backward_data_pd.diff_dst_desc(), stream, dy_buffer);
    if (ctx->needs_input_grad(0)) {
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

// Whether oneDNN computes this convolution here (else torch::conv2d), its output in `out_layout`.
bool usable(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
            ConvAlgorithm algorithm, Layout out_layout) {
  const auto fp32_cpu = [](const torch::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat;
  };
  const bool activation = input.dim() == 4 || (input.dim() == 5 && input.size(4) == 16);
  return fp32_cpu(input) && fp32_cpu(weight) && fp32_cpu(bias) && activation && weight.dim() == 4 &&
         weight.size(2) == 3 && weight.size(3) == 3 && dims_of(input)[1] == weight.size(1) &&
         bias.numel() == weight.size(0) && !compat::autocast_enabled(c10::DeviceType::CPU) &&
         primitives_for(shape_of(input, weight, out_layout), algorithm).ok;
}

}  // namespace

bool onednn_conv2d_available(int64_t in_channels, int64_t out_channels, ConvAlgorithm algorithm) {
  return primitives_for(
             {1, in_channels, out_channels, 8, 8, Layout::kChannelsLast, Layout::kChannelsLast},
             algorithm)
      .ok;
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
  TORCH_CHECK(onednn_conv2d_blocked_applies(input, weight, bias, algorithm),
              "onednn_conv2d_blocked: oneDNN has no such convolution here (check "
              "onednn_conv2d_blocked_applies() first)");
  return OnednnConv2dFunction::apply(input, weight, bias, algorithm, Layout::kBlocked);
}

#else  // no oneDNN 2.x: LibTorch's convolutions only

bool onednn_conv2d_available(int64_t, int64_t, ConvAlgorithm) { return false; }

torch::Tensor onednn_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias, ConvAlgorithm) {
  return direct_conv2d(input, weight, bias);
}

bool onednn_conv2d_blocked_applies(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                   ConvAlgorithm) {
  return false;
}

torch::Tensor onednn_conv2d_blocked(const torch::Tensor&, const torch::Tensor&,
                                    const torch::Tensor&, ConvAlgorithm) {
  TORCH_CHECK(false, "onednn_conv2d_blocked: ddp.cpp was built without oneDNN 2.x");
}

#endif

}  // namespace ddp::models
