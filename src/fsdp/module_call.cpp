// The registry of forward hooks ddp::call runs: one entry per module, looked up by address on
// every call (a lock and a hash lookup, against a forward's milliseconds).
#include "ddp/fsdp/module_call.h"

#include <mutex>
#include <unordered_map>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, std::shared_ptr<const ForwardHooks>> hooks;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: handles may outlive static teardown
  return *r;
}

}  // namespace

ForwardHooksHandle& ForwardHooksHandle::operator=(ForwardHooksHandle&& other) noexcept {
  if (this != &other) {
    ForwardHooksHandle old(std::move(*this));  // removes this handle's hooks
    module_ = other.module_;
    other.module_ = nullptr;
  }
  return *this;
}

ForwardHooksHandle::~ForwardHooksHandle() {
  if (!module_) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.hooks.erase(module_);
}

ForwardHooksHandle register_forward_hooks(const torch::nn::Module& module, ForwardHooks hooks) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, inserted] =
      r.hooks.emplace(&module, std::make_shared<const ForwardHooks>(std::move(hooks)));
  if (!inserted) {
    throw InvalidArgument(c10::str("register_forward_hooks: module ", module.name(),
                                   " already has forward hooks (is it sharded twice?)"));
  }
  return ForwardHooksHandle(&module);
}

std::shared_ptr<const ForwardHooks> forward_hooks_of(const torch::nn::Module& module) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.hooks.find(&module);
  return it == r.hooks.end() ? nullptr : it->second;
}

}  // namespace ddp
