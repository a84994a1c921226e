#include "ddp/models/onednn_max_pool2d.h"

#include <string>
#include <tuple>

#include "models/onednn_support.h"

namespace ddp::models {
namespace {

// LibTorch's max-pool on a view of `x`: each [n][c/B] slice is an H x W image of B channels,
// channels-last, which LibTorch's channels-last max-pool reads without a copy.
torch::Tensor libtorch_max_pool2d(const torch::Tensor& x) {
  const int64_t n = x.size(0), blocks = x.size(1), h = x.size(2), w = x.size(3), b = x.size(4);
  const torch::Tensor images = x.reshape({n * blocks, h, w, b}).permute({0, 3, 1, 2});
  const torch::Tensor pooled = torch::max_pool2d(images, 2, 2);
  return pooled.permute({0, 2, 3, 1}).reshape({n, blocks, pooled.size(2), pooled.size(3), b});
}

}  // namespace

#if defined(DDP_ONEDNN_LAYERS)
namespace {

using namespace onednn;

// Made only where both passes run jit kernels (ok), not oneDNN's reference loop.
struct Primitives {
  bool ok = false;
  dnnl::pooling_forward::primitive_desc forward_pd;
  dnnl::pooling_backward::primitive_desc backward_pd;
  dnnl::pooling_forward forward;
  dnnl::pooling_backward backward;
};

// N, C, H, W of the input, and its channels per block.
using Shape = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;

Primitives make_primitives(const Shape& shape) {
  const auto [n, c, h, w, block] = shape;
  const memory::desc src({n, c, h, w}, kF32, blocked_tag(block));
  const memory::desc dst({n, c, h / 2, w / 2}, kF32, blocked_tag(block));
  const memory::dims window{2, 2}, no_padding{0, 0};
  Primitives p;
  const auto forward = [&] {
    return dnnl::pooling_forward::primitive_desc(
        dnnl::pooling_forward::desc(dnnl::prop_kind::forward_training, dnnl::algorithm::pooling_max,
                                    src, dst, window, window, no_padding, no_padding),
        attr(), cpu_engine());
  };
  const auto backward = [&] {
    return dnnl::pooling_backward::primitive_desc(
        dnnl::pooling_backward::desc(dnnl::algorithm::pooling_max, src, dst, window, window,
                                     no_padding, no_padding),
        attr(), cpu_engine(), p.forward_pd);
  };
  // Where oneDNN has no such pooling (a side of 1, say) or only its reference loop: LibTorch's.
  p.ok = make_jit(p.forward_pd, forward) && make_jit(p.backward_pd, backward);
  if (!p.ok) return p;
  p.forward = dnnl::pooling_forward(p.forward_pd);
  p.backward = dnnl::pooling_backward(p.backward_pd);
  return p;
}

const Primitives& primitives_for(const Shape& shape) {
  return built_once<Primitives>(shape, make_primitives);
}

Shape shape_of(const torch::Tensor& x) {
  const memory::dims dims = dims_of(x);
  return {dims[0], dims[1], dims[2], dims[3], x.size(4)};
}

// Whether oneDNN pools `x` (blocked) here: fp32 on the CPU, with jit kernels for its block.
bool usable(const torch::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == torch::kFloat && primitives_for(shape_of(x)).ok;
}

// Forward keeps oneDNN's workspace (where each maximum was) for backward, not the input.
struct MaxPoolFunction : torch::autograd::Function<MaxPoolFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input) {
    const torch::Tensor x = input.contiguous();
    const Shape shape = shape_of(x);
    const Primitives& p = primitives_for(shape);
    const auto [n, c, h, w, block] = shape;
    torch::Tensor out = torch::empty({n, c / block, h / 2, w / 2, block}, x.options());
    const torch::Tensor workspace = bytes(p.forward_pd.workspace_desc().get_size());
    dnnl::stream stream(cpu_engine());
    execute(p.forward, p.forward_pd, stream,
            {{DNNL_ARG_SRC, wrap(x)},
             {DNNL_ARG_DST, wrap(out)},
             {DNNL_ARG_WORKSPACE,
              memory(p.forward_pd.workspace_desc(), cpu_engine(), workspace.data_ptr())}});
    stream.wait();
    ctx->saved_data["workspace"] = workspace;
    ctx->saved_data["sizes"] = std::vector<int64_t>(x.sizes().begin(), x.sizes().end());
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const torch::Tensor workspace = ctx->saved_data["workspace"].toTensor();
    const torch::Tensor grad_out = grads[0].contiguous();
    torch::Tensor grad_input = torch::empty(sizes, grad_out.options());
    const Primitives& p = primitives_for(shape_of(grad_input));
    dnnl::stream stream(cpu_engine());
    execute(p.backward, p.backward_pd, stream,
            {{DNNL_ARG_DIFF_DST, wrap(grad_out)},
             {DNNL_ARG_DIFF_SRC, wrap(grad_input)},
             {DNNL_ARG_WORKSPACE,
              memory(p.backward_pd.workspace_desc(), cpu_engine(), workspace.data_ptr())}});
    stream.wait();
    return {grad_input};
  }
};

}  // namespace

#endif

namespace {

void check_blocked(const torch::Tensor& x) {
  TORCH_CHECK(onednn::is_blocked_activation(x),
              "blocked_max_pool2d: expected a blocked activation [N, C/B, H, W, B], B 8 or 16, "
              "got ",
              x.sizes());
}

}  // namespace

torch::Tensor blocked_max_pool2d(const torch::Tensor& x) {
  check_blocked(x);
#if defined(DDP_ONEDNN_LAYERS)
  if (usable(x)) return MaxPoolFunction::apply(x);
#endif
  return libtorch_max_pool2d(x);
}

std::string blocked_max_pool2d_kernel(const torch::Tensor& x) {
  check_blocked(x);
#if defined(DDP_ONEDNN_LAYERS)
  if (usable(x))
    return "oneDNN " + std::string(primitives_for(shape_of(x)).forward_pd.impl_info_str());
  if (x.device().is_cpu() && x.scalar_type() == torch::kFloat) {
    return "LibTorch (oneDNN has no jit kernel for this CPU)";
  }
  return "LibTorch (not fp32 on the CPU)";
#else
  return "LibTorch (ddp.cpp was built without oneDNN 2.x)";
#endif
}

}  // namespace ddp::models
