// Internal to models/: what ddp.cpp's oneDNN layers (onednn_conv2d, onednn_max_pool2d) share:
// the engine, how torch tensors map onto oneDNN memory in each activation layout, and running a
// primitive with a scratchpad of its own.
#pragma once

#include <torch/torch.h>

#include "ddp_build_config.h"

namespace ddp::models::onednn {

/// Whether `t` is a blocked activation, [N, C/B, H, W, B] with B 8 (AVX2's and SSE4.1's kernels)
/// or 16 (AVX-512's): with or without oneDNN, the layers accept both.
inline bool is_blocked_activation(const torch::Tensor& t) {
  return t.dim() == 5 && (t.size(4) == 8 || t.size(4) == 16);
}

}  // namespace ddp::models::onednn

// oneDNN 2.x only: 3.0 replaced the operation descriptors these layers build their primitives
// from (CMake builds them only with a 2.x). Without it, LibTorch's own ops.
#if defined(DDP_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#if DNNL_VERSION_MAJOR != 2
#error "oneDNN's headers seen here are not the 2.x library CMake found (CMakeLists.txt, ddp_models)"
#endif
#define DDP_ONEDNN_LAYERS 1
#endif

#if defined(DDP_ONEDNN_LAYERS)
#include <array>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ddp::models::onednn {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr auto kF32 = memory::data_type::f32;

inline dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Channels per block of the blocked layout that oneDNN's jit kernels use on this CPU: 16 with
// AVX-512 (nChw16c), 8 with AVX2 and SSE4.1 (nChw8c). A blocked tensor of the other size gets only
// oneDNN's reference loop, about 1,000x slower. ONEDNN_MAX_CPU_ISA caps the ISA it sees.
inline int64_t cpu_block_channels() {
  static const int64_t block = [] {
    const int isa = int(dnnl::get_effective_cpu_isa());
    const int avx512 = int(dnnl::cpu_isa::avx512_core);  // ISAs are bit masks of their features
    return (isa & avx512) == avx512 ? 16 : 8;
  }();
  return block;
}

// Whether a primitive runs one of oneDNN's jit kernels for the operation itself (jit:avx2,
// jit_wino_4x3:avx512_core, brgconv:avx512_core, ...), not its reference loop (ref:any), which it
// falls back to for what no kernel of this CPU takes. Not its im2col + GEMM convolutions
// (x64:gemm:jit) either: oneDNN 2.6's GEMM (Debian 12) answers "unimplemented" when executed in a
// process that loads PyPI's LibTorch 2.14, whose libtorch_cpu exports MKL's BLAS symbols (in a
// program of its own it runs); where oneDNN would choose it (SSE4.1 CPUs), LibTorch computes.
template <class PrimitiveDesc>
bool runs_jit_kernel(const PrimitiveDesc& pd) {
  const std::string impl = pd.impl_info_str();
  return impl.rfind("jit", 0) == 0 || impl.rfind("brg", 0) == 0;
}

// `make_pd()`'s primitive descriptor in `pd`, moved on to the first of oneDNN's implementations
// that runs a jit kernel; false where none does (or oneDNN has no implementation at all).
template <class PrimitiveDesc, class Make>
bool make_jit(PrimitiveDesc& pd, const Make& make_pd) {
  try {
    pd = make_pd();
  } catch (const dnnl::error&) {
    return false;  // unimplemented: no such kernels for this CPU or shape
  }
  do {
    if (runs_jit_kernel(pd)) return true;
  } while (pd.next_impl());
  return false;
}

// How a torch tensor holds an activation: contiguous (NCHW), channels-last (NHWC), or blocked
// (nChw16c or nChw8c as a 5-d [N, C/B, H, W, B] tensor, see onednn_conv2d_blocked()).
enum class Layout { kContiguous, kChannelsLast, kBlocked };

// The layout of `t`, once dense(): blocked when 5-d; else channels-last when not contiguous (a
// tensor dense() has to copy becomes channels-last, and was not contiguous either).
inline Layout layout_of(const torch::Tensor& t) {
  if (t.dim() == 5) return Layout::kBlocked;
  return t.is_contiguous() ? Layout::kContiguous : Layout::kChannelsLast;
}

// The logical [N, C, H, W] of an activation in any layout.
inline memory::dims dims_of(const torch::Tensor& t) {
  if (t.dim() == 5) return {t.size(0), t.size(1) * t.size(4), t.size(2), t.size(3)};
  return {t.size(0), t.size(1), t.size(2), t.size(3)};
}

// oneDNN's tag of blocks of `block` channels.
inline Tag blocked_tag(int64_t block) { return block == 8 ? Tag::nChw8c : Tag::nChw16c; }

// A blocked activation's memory description, in blocks of this CPU's size.
inline memory::desc blocked_desc(const memory::dims& dims) {
  return memory::desc(dims, kF32, blocked_tag(cpu_block_channels()));
}

// The activation or weight `t` (dense, in any layout above) as oneDNN memory, without a copy.
inline memory wrap(const torch::Tensor& t) {
  const Layout layout = layout_of(t);
  const Tag tag = layout == Layout::kBlocked      ? blocked_tag(t.size(4))
                  : layout == Layout::kContiguous ? Tag::nchw
                                                  : Tag::nhwc;
  return memory(memory::desc(dims_of(t), kF32, tag), cpu_engine(), t.data_ptr());
}

inline memory wrap_vector(const torch::Tensor& t) {
  return memory(memory::desc({t.numel()}, kF32, Tag::x), cpu_engine(), t.data_ptr());
}

// make(key), made on the first call with `key` and kept for the process; safe from several
// threads. For primitives by problem shape: a few per run (the batch size's, the last batch's).
template <class Value, class Key, class Make>
const Value& built_once(const Key& key, const Make& make) {
  static std::mutex mutex;
  static std::map<Key, Value> built;
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = built.find(key);
  if (it == built.end()) it = built.emplace(key, make(key)).first;
  return it->second;
}

// A buffer of `bytes` as a torch tensor, so that the allocator reuses it step after step.
inline torch::Tensor bytes(size_t size) { return torch::empty({int64_t(size)}, torch::kUInt8); }

// The attributes of every primitive here: a scratchpad brought by each call (see execute()).
inline dnnl::primitive_attr attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Runs `primitive` of `pd` with `args` and a scratchpad of its own: oneDNN's built-in one is
// shared by all threads unless oneDNN was built for concurrent execution, and ranks may run as
// threads of one process.
template <class PrimitiveDesc>
void execute(const dnnl::primitive& primitive, const PrimitiveDesc& pd, dnnl::stream& stream,
             std::unordered_map<int, memory> args) {
  const memory::desc desc = pd.scratchpad_desc();
  const torch::Tensor scratchpad = bytes(desc.get_size());
  args.emplace(DNNL_ARG_SCRATCHPAD, memory(desc, cpu_engine(), scratchpad.data_ptr()));
  primitive.execute(stream, args);
}

// `from` copied into `to`, another layout of the same tensor.
inline void reorder(const memory& from, const memory& to, dnnl::stream& stream) {
  const dnnl::reorder::primitive_desc pd(from, to, attr());
  execute(dnnl::reorder(pd), pd, stream, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

// `from` in the layout `desc`: itself when it has it, else reordered into a buffer that `keep`
// holds.
inline memory in_layout(const memory& from, const memory::desc& desc, dnnl::stream& stream,
                        torch::Tensor& keep) {
  if (from.get_desc() == desc) return from;
  keep = bytes(desc.get_size());
  const memory to(desc, cpu_engine(), keep.data_ptr());
  reorder(from, to, stream);
  return to;
}

// `t` in its layout, dense: 5-d ones contiguous, 4-d ones contiguous or channels-last (others
// become channels-last).
inline torch::Tensor dense(const torch::Tensor& t) {
  if (t.dim() == 5) return t.contiguous();
  return t.is_contiguous() || t.is_contiguous(c10::MemoryFormat::ChannelsLast)
             ? t
             : t.contiguous(c10::MemoryFormat::ChannelsLast);
}

// `t`, an activation of the logical shape [N, C, H, W], as a dense tensor in `layout`.
inline torch::Tensor as_layout(const torch::Tensor& t, Layout layout) {
  if (layout == Layout::kBlocked) return t.contiguous();
  return t.contiguous(layout == Layout::kChannelsLast ? c10::MemoryFormat::ChannelsLast
                                                      : c10::MemoryFormat::Contiguous);
}

// A new activation of the logical shape `dims` in `layout`.
inline torch::Tensor empty_activation(const memory::dims& dims, Layout layout,
                                      const torch::TensorOptions& options) {
  const auto [n, c, h, w] = std::array<int64_t, 4>{dims[0], dims[1], dims[2], dims[3]};
  const int64_t block = cpu_block_channels();
  if (layout == Layout::kBlocked) return torch::empty({n, c / block, h, w, block}, options);
  return torch::empty({n, c, h, w}, options.memory_format(layout == Layout::kChannelsLast
                                                              ? c10::MemoryFormat::ChannelsLast
                                                              : c10::MemoryFormat::Contiguous));
}

}  // namespace ddp::models::onednn

#endif  // DDP_ONEDNN_LAYERS
