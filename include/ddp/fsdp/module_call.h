// Forward hooks for C++ modules. A Python module's __call__ runs its forward hooks around
// forward(); a LibTorch module has neither, so FullyShardedDataParallel
// (fully_shard.h) cannot see a sharded block begin. A model calls its sharded submodules through
// ddp::call, which runs the hooks registered on them, and is forward() itself where there are none:
//
//   for (auto& block : blocks_) x = ddp::call(block, x);   // not block->forward(x)
#pragma once

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

namespace ddp {

namespace detail {
inline void collect_tensors(const torch::Tensor& t, std::vector<torch::Tensor>& out) {
  out.push_back(t);
}
inline void collect_tensors(const std::vector<torch::Tensor>& ts, std::vector<torch::Tensor>& out) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <typename... T>
void collect_tensors(const std::tuple<T...>& tuple, std::vector<torch::Tensor>& out) {
  std::apply([&](const auto&... parts) { (collect_tensors(parts, out), ...); }, tuple);
}
template <typename T>
void collect_tensors(const T&, std::vector<torch::Tensor>&) {}  // not a tensor: nothing to trace
}  // namespace detail

/// What runs around a module's forward when it is called through ddp::call.
struct ForwardHooks {
  /// Before forward (PyTorch's forward pre-hook).
  std::function<void()> before;
  /// After forward, given the tensors of its output (a tensor, a vector or tuple of them).
  std::function<void(const std::vector<torch::Tensor>& outputs)> after;
};

/// Removes its hooks when destroyed (PyTorch's RemovableHandle).
class ForwardHooksHandle {
 public:
  ForwardHooksHandle() = default;
  explicit ForwardHooksHandle(const torch::nn::Module* module) : module_(module) {}
  ForwardHooksHandle(ForwardHooksHandle&& other) noexcept : module_(other.module_) {
    other.module_ = nullptr;
  }
  ForwardHooksHandle& operator=(ForwardHooksHandle&& other) noexcept;
  ForwardHooksHandle(const ForwardHooksHandle&) = delete;
  ForwardHooksHandle& operator=(const ForwardHooksHandle&) = delete;
  ~ForwardHooksHandle();

 private:
  const torch::nn::Module* module_ = nullptr;
};

/// Registers `hooks` on `module` until the handle is destroyed. Throws InvalidArgument when the
/// module has hooks already.
ForwardHooksHandle register_forward_hooks(const torch::nn::Module& module, ForwardHooks hooks);

/// The hooks registered on `module` (null: none).
std::shared_ptr<const ForwardHooks> forward_hooks_of(const torch::nn::Module& module);

/// module.forward(args...), with its hooks around it.
template <typename ModuleType, typename... Args,
          std::enable_if_t<std::is_base_of_v<torch::nn::Module, ModuleType>, int> = 0>
auto call(ModuleType& module, Args&&... args) {
  const auto hooks = forward_hooks_of(module);
  if (!hooks) return module.forward(std::forward<Args>(args)...);
  if (hooks->before) hooks->before();
  auto output = module.forward(std::forward<Args>(args)...);
  if (hooks->after) {
    std::vector<torch::Tensor> tensors;
    detail::collect_tensors(output, tensors);
    hooks->after(tensors);
  }
  return output;
}

template <typename ModuleType, typename... Args>
auto call(const std::shared_ptr<ModuleType>& module, Args&&... args) {
  return call(*module, std::forward<Args>(args)...);
}

template <typename ModuleType, typename... Args>
auto call(const torch::nn::ModuleHolder<ModuleType>& module, Args&&... args) {
  return call(*module.ptr(), std::forward<Args>(args)...);
}

}  // namespace ddp
