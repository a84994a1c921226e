#include "models/onednn_conv2d.h"

#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "ddp_build_config.h"
#include "torch_compat.h"

// oneDNN 2.x only: 3.0 replaced the operation descriptors this code builds its primitives from,
// and ddp.cpp has not been measured against its kernels. Without it, torch::conv2d.
#if defined(DDP_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_VERSION_MAJOR == 2
#define DDP_ONEDNN_CONV 1
#endif
#endif

namespace ddp::models {
namespace {

torch::Tensor direct_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias) {
  return torch::conv2d(input, weight, bias, /*stride=*/1, /*padding=*/1);
}

}  // namespace

#if defined(DDP_ONEDNN_CONV)
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

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

// N, C, K, H, W, and whether the input is channels-last.
using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

Primitives make_primitives(const Shape& shape, ConvAlgorithm algorithm) {
  const auto [n, c, k, h, w, channels_last] = shape;
  const memory::dims src{n, c, h, w}, weights{k, c, 3, 3}, dst{n, k, h, w}, stride{1, 1}, pad{1, 1};
  // Layouts left to oneDNN (blocked ones); the bias is a plain vector.
  const auto any = [](const memory::dims& dims) { return memory::desc(dims, kF32, Tag::any); };
  // A direct forward reads and writes channels-last tensors as they are: oneDNN's blocked
  // output would cost a reorder as long as the convolution (Net's conv1: 1.7 against 1.1 + 2 ms).
  const bool plain = algorithm == ConvAlgorithm::kDirect && channels_last;
  const auto forward_io = [&](const memory::dims& dims) {
    return plain ? memory::desc(dims, kF32, Tag::nhwc) : any(dims);
  };
  const memory::desc bias({k}, kF32, Tag::x);
  // Each call brings its own scratchpad: oneDNN's built-in one is shared by all threads unless
  // oneDNN was built for concurrent execution, and ranks may run as threads of one process.
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const auto alg = algorithm == ConvAlgorithm::kWinograd ? dnnl::algorithm::convolution_winograd
                                                         : dnnl::algorithm::convolution_direct;
  Primitives p;
  // oneDNN pads channels to 16 for Winograd rather than refuse, which is slower than direct.
  if (algorithm == ConvAlgorithm::kWinograd && (c % 16 != 0 || k % 16 != 0)) return p;
  try {
    p.forward_pd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, alg, forward_io(src),
                                        any(weights), bias, forward_io(dst), stride, pad, pad),
        attr, cpu_engine());
    p.backward_data_pd = dnnl::convolution_backward_data::primitive_desc(
        dnnl::convolution_backward_data::desc(alg, any(src), any(weights), any(dst), stride, pad,
                                              pad),
        attr, cpu_engine(), p.forward_pd);
    p.backward_weights_pd = dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(alg, any(src), any(weights), bias, any(dst),
                                                 stride, pad, pad),
        attr, cpu_engine(), p.forward_pd);
  } catch (const dnnl::error&) {
    return p;  // unimplemented: no such kernels for this CPU or shape
  }
  p.forward = dnnl::convolution_forward(p.forward_pd);
  p.backward_data = dnnl::convolution_backward_data(p.backward_data_pd);
  p.backward_weights = dnnl::convolution_backward_weights(p.backward_weights_pd);
  p.ok = true;
  return p;
}

// Primitives by shape and algorithm, built once (a few per run: the batch size, the last batch's).
const Primitives& primitives_for(const Shape& shape, ConvAlgorithm algorithm) {
  static std::mutex mutex;
  static std::map<std::pair<Shape, ConvAlgorithm>, Primitives> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(shape, algorithm);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_primitives(shape, algorithm)).first;
  return it->second;
}

// Whether `t`, once dense(), is channels-last: not contiguous (a tensor dense() has to copy
// becomes channels-last, and was not contiguous either).
bool channels_last(const torch::Tensor& t) { return !t.is_contiguous(); }

Shape shape_of(const torch::Tensor& input, const torch::Tensor& weight) {
  return {input.size(0), input.size(1), weight.size(0),
          input.size(2), input.size(3), channels_last(input)};
}

// The 4-d tensor `t` (dense, contiguous or channels-last) as oneDNN memory, without a copy.
memory wrap(const torch::Tensor& t) {
  const memory::dims dims(t.sizes().begin(), t.sizes().end());
  return memory(memory::desc(dims, kF32, channels_last(t) ? Tag::nhwc : Tag::nchw), cpu_engine(),
                t.data_ptr());
}

memory wrap_vector(const torch::Tensor& t) {
  return memory(memory::desc({t.numel()}, kF32, Tag::x), cpu_engine(), t.data_ptr());
}

// A buffer of `bytes` as a torch tensor, so that the allocator reuses it step after step.
torch::Tensor bytes(size_t size) { return torch::empty({int64_t(size)}, torch::kUInt8); }

// Runs `primitive` of `pd` with `args` and a scratchpad of its own (see make_primitives).
template <class PrimitiveDesc>
void execute(const dnnl::primitive& primitive, const PrimitiveDesc& pd, dnnl::stream& stream,
             std::unordered_map<int, memory> args) {
  const memory::desc desc = pd.scratchpad_desc();
  const torch::Tensor scratchpad = bytes(desc.get_size());
  args.emplace(DNNL_ARG_SCRATCHPAD, memory(desc, cpu_engine(), scratchpad.data_ptr()));
  primitive.execute(stream, args);
}

// `from` copied into `to`, another layout of the same tensor.
void reorder(const memory& from, const memory& to, dnnl::stream& stream) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::reorder::primitive_desc pd(from, to, attr);
  execute(dnnl::reorder(pd), pd, stream, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

// `from` in the layout `desc`: itself when it has it, else reordered into a buffer that `keep`
// holds.
memory in_layout(const memory& from, const memory::desc& desc, dnnl::stream& stream,
                 torch::Tensor& keep) {
  if (from.get_desc() == desc) return from;
  keep = bytes(desc.get_size());
  const memory to(desc, cpu_engine(), keep.data_ptr());
  reorder(from, to, stream);
  return to;
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

// The memory format a result shaped like `t` gets: channels-last when `t` is.
c10::MemoryFormat format_of(const torch::Tensor& t) {
  return channels_last(t) ? c10::MemoryFormat::ChannelsLast : c10::MemoryFormat::Contiguous;
}

torch::Tensor dense(const torch::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(c10::MemoryFormat::ChannelsLast)
             ? t
             : t.contiguous(c10::MemoryFormat::ChannelsLast);
}

// The autograd function: forward by the forward primitive, backward by the backward-data and
// backward-weights ones, each only when its gradient is needed.
struct OnednnConv2dFunction : torch::autograd::Function<OnednnConv2dFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias,
                               ConvAlgorithm algorithm) {
    const torch::Tensor x = dense(input), w = dense(weight), b = bias.contiguous();
    const Primitives& p = primitives_for(shape_of(x, w), algorithm);
    torch::Tensor out = torch::empty({x.size(0), w.size(0), x.size(2), x.size(3)},
                                     x.options().memory_format(format_of(x)));
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
    // The input in oneDNN's layout, when it was reordered: backward-weights reads it again.
    if (x_buffer.defined()) ctx->saved_data["src_reordered"] = x_buffer;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const auto algorithm = ConvAlgorithm(ctx->saved_data["algorithm"].toInt());
    const Primitives& p = primitives_for(shape_of(x, w), algorithm);
    const torch::Tensor grad_out = grads[0].contiguous(format_of(x));
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
    return {grad_input, grad_weight, grad_bias, torch::Tensor()};
  }
};

bool usable(const torch::Tensor& input, const torch::Tensor& weight, const torch::Tensor& bias,
            ConvAlgorithm algorithm) {
  const auto fp32_cpu = [](const torch::Tensor& t) {
    return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat;
  };
  return fp32_cpu(input) && fp32_cpu(weight) && fp32_cpu(bias) && input.dim() == 4 &&
         weight.dim() == 4 && weight.size(2) == 3 && weight.size(3) == 3 &&
         input.size(1) == weight.size(1) && bias.numel() == weight.size(0) &&
         !compat::autocast_enabled(c10::DeviceType::CPU) &&
         primitives_for(shape_of(input, weight), algorithm).ok;
}

}  // namespace

bool onednn_conv2d_available(int64_t in_channels, int64_t out_channels, ConvAlgorithm algorithm) {
  return primitives_for({1, in_channels, out_channels, 8, 8, true}, algorithm).ok;
}

torch::Tensor onednn_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias, ConvAlgorithm algorithm) {
  if (!usable(input, weight, bias, algorithm)) return direct_conv2d(input, weight, bias);
  return OnednnConv2dFunction::apply(input, weight, bias, algorithm);
}

#else  // no oneDNN 2.x: LibTorch's convolutions only

bool onednn_conv2d_available(int64_t, int64_t, ConvAlgorithm) { return false; }

torch::Tensor onednn_conv2d(const torch::Tensor& input, const torch::Tensor& weight,
                            const torch::Tensor& bias, ConvAlgorithm) {
  return direct_conv2d(input, weight, bias);
}

#endif

}  // namespace ddp::models
