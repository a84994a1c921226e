// What differs between the LibTorch versions built here in the APIs the library calls: c10d's
// backends and stores, autograd's hooks, autocast, optimizer state, the allocator (Debian 12's
// 1.13.1, Debian 13's 2.6; PyPI's 2.11 and 2.14.1). The c10d and autograd internals those differ
// in are included through here.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/Allocator.h>
#include <torch/csrc/api/include/torch/version.h>

// True when building against LibTorch major.minor or later.
#define DDP_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||      \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
#if defined(USE_C10D_NCCL)
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#if defined(USE_C10D_MPI)
#include <torch/csrc/distributed/c10d/ProcessGroupMPI.hpp>
#endif
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

namespace ddp::compat {

// In 1.13 ProcessGroupGloo derives from c10d::ProcessGroup; from 2.0 from c10d::Backend. Both
// keep the collective methods used here (allreduce, broadcast, allgather, barrier) with the
// same signatures, so the concrete class is used directly.
using GlooGroup = c10d::ProcessGroupGloo;

// The common base of the concrete groups, whose virtual collectives ddp.cpp calls.
#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// Gloo's all-reduce rejects bfloat16 in 1.13 ("Invalid scalar type"); 2.x reduces it.
#if TORCH_VERSION_MAJOR >= 2
constexpr bool kGlooReducesBFloat16 = true;
#else
constexpr bool kGlooReducesBFloat16 = false;
#endif

#if defined(USE_C10D_NCCL)
// Compiled where LibTorch has c10d's NCCL backend (PyPI's CUDA wheels; not Debian 12's 1.13), as
// in CI; run by scripts/gpu-check.sh on a GPU machine.
inline c10::intrusive_ptr<CollectiveBackend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                                       int rank, int size,
                                                       std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}
#endif

#if defined(USE_C10D_NCCL)
// Makes `device` (cuda:N) the current GPU of this process.
inline void set_current_cuda_device(const c10::Device& device) {
  c10::cuda::set_device(device.index());
}
#endif

#if defined(USE_C10D_MPI)
// MPI decides rank and size itself (mpirun); only compiled where LibTorch has MPI.
inline c10::intrusive_ptr<CollectiveBackend> make_mpi() {
  return c10d::ProcessGroupMPI::createProcessGroupMPI({});
}
#endif

inline c10::intrusive_ptr<GlooGroup> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                               int rank, int size,
                                               std::chrono::milliseconds timeout,
                                               const std::string& bind_host,
                                               const std::string& bind_interface) {
  auto options = GlooGroup::Options::create();
  options->timeout = timeout;
  options->devices.push_back(bind_interface.empty()
                                 ? GlooGroup::createDeviceForHostname(bind_host)
                                 : GlooGroup::createDeviceForInterface(bind_interface));
  return c10::make_intrusive<GlooGroup>(store, rank, size, options);
}

// Whether the TCPStore server can take a socket that is already listening (masterListenFd,
// in 2.4 and later): then it listens only on the address that socket is bound to. 1.13's
// server always binds every interface of the host.
#if DDP_TORCH_AT_LEAST(2, 4)
constexpr bool kTcpStoreTakesListenFd = true;
#else
constexpr bool kTcpStoreTakesListenFd = false;
#endif

// `listen_fd`: a socket bound to host:port and listening, for the server (where
// kTcpStoreTakesListenFd; the store then owns it), or -1.
inline c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, int port,
                                                      bool is_server, int world_size,
                                                      std::chrono::milliseconds timeout,
                                                      int listen_fd = -1) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(port);
  opts.isServer = is_server;
  opts.numWorkers = world_size;
  opts.waitWorkers = false;  // ddp checks that every rank arrived itself, with a clear message
  opts.timeout = timeout;
#if DDP_TORCH_AT_LEAST(2, 2)
  // From 2.4 the default is the libuv server, which a LibTorch may be built without (Debian
  // 13's 2.6 is: "use_libuv was requested but PyTorch was build without libuv support"). The
  // classic server is in every build and talks to libuv clients alike.
  opts.useLibUV = false;
#endif
#if DDP_TORCH_AT_LEAST(2, 4)
  if (listen_fd >= 0) opts.masterListenFd = listen_fd;
#else
  (void)listen_fd;
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, opts);
}

// Runs `fn` after the backward pass that is running on this thread has finished.
inline void queue_end_of_backward(std::function<void()> fn) {
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(fn));
}

// An owning pointer to an autograd node: std::shared_ptr in 1.13 (and 2.6), c10::intrusive_ptr
// in 2.14.
using NodePtr =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));

// The AccumulateGrad node of a leaf tensor; holding it keeps hooks on it alive.
inline NodePtr grad_accumulator(const torch::Tensor& param) {
  return torch::autograd::impl::grad_accumulator(param);
}

// Runs `fn` each time `node` (an AccumulateGrad) has run, i.e. after the gradient was added.
inline void add_post_hook(torch::autograd::Node& node, std::function<void()> fn) {
  node.add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [fn = std::move(fn)](const torch::autograd::variable_list& outputs,
                           const torch::autograd::variable_list& /*inputs*/) {
        fn();
        return outputs;
      }));
}

// Autocast's switches: per device type from 2.4 (set_autocast_enabled(kCPU, ...)); before
// that one function per device (set_cpu_enabled, set_enabled for CUDA), deprecated in 2.4.
#if DDP_TORCH_AT_LEAST(2, 4)
inline bool autocast_enabled(c10::DeviceType type) {
  return at::autocast::is_autocast_enabled(type);
}
inline at::ScalarType autocast_dtype(c10::DeviceType type) {
  return at::autocast::get_autocast_dtype(type);
}
inline void set_autocast(c10::DeviceType type, bool enabled, at::ScalarType dtype) {
  at::autocast::set_autocast_enabled(type, enabled);
  at::autocast::set_autocast_dtype(type, dtype);
}
#else
inline bool autocast_enabled(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
inline at::ScalarType autocast_dtype(c10::DeviceType type) {
  return type == c10::DeviceType::CPU ? at::autocast::get_autocast_cpu_dtype()
                                      : at::autocast::get_autocast_gpu_dtype();
}
inline void set_autocast(c10::DeviceType type, bool enabled, at::ScalarType dtype) {
  if (type == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  }
}
#endif

}  // namespace ddp::compat

namespace ddp::compat {

// The key under which torch::optim keeps a parameter's state: the TensorImpl's address printed
// as a string in 1.13, the address itself (void*) in 2.x.
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

// (A template, so that only the branch for this version's key type is compiled.)
template <typename Key = OptimizerStateKey>
Key optimizer_state_key(const torch::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream out;
    out << param.unsafeGetTensorImpl();  // what c10::guts::to_string did in 1.13
    return out.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

// c10::Allocator changed in 2.3: allocate() lost its const, and copy_data() became pure virtual.
// An allocator derives from this and implements allocate_bytes().
struct CpuAllocatorBase : c10::Allocator {
  virtual c10::DataPtr allocate_bytes(size_t n) const = 0;
#if DDP_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(size_t n) override { return allocate_bytes(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(size_t n) const override { return allocate_bytes(n); }
#endif
};

}  // namespace ddp::compat
