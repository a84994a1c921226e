// The gradient reducer behind DistributedDataParallel: parameters grouped into buckets in
// reverse registration order (the order backward tends to produce them), autograd hooks that
// mark each gradient ready as it is accumulated, and an all-reduce per bucket started the moment
// the bucket is full, overlapping the rest of backward. At the end of backward (a callback queued
// on the autograd engine) every reduction is waited for; gradients are views into the buckets,
// so the averaged values are already in each parameter's .grad.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddp/algorithms/comm_hook.h"

namespace ddp {

class ProcessGroup;

/// Options of DistributedDataParallel, named as PyTorch names them.
struct DDPOptions {
  /// Cap of every bucket but the first, in MiB.
  TORCH_ARG(double, bucket_cap_mb) = 25.0;
  /// Cap of the first bucket (the last gradients of backward), small so the first all-reduce
  /// starts early.
  TORCH_ARG(double, first_bucket_cap_mb) = 1.0;
  /// Find parameters that did not take part in producing the output after each forward and
  /// mark them ready, so backward never waits for them.
  TORCH_ARG(bool, find_unused_parameters) = false;
  /// Copy rank 0's buffers (BatchNorm running stats, ...) to every rank before each forward.
  TORCH_ARG(bool, broadcast_buffers) = true;
  /// After the first iteration, rebuild buckets in the order gradients actually became ready.
  TORCH_ARG(bool, rebuild_buckets) = true;
};

/// What the last synchronised backward did, for tests, logs and benchmarks.
struct ReducerStats {
  int64_t iterations = 0;  // synchronised backward passes finished
  int num_buckets = 0;
  bool buckets_rebuilt = false;
  int hooks_per_iteration = 0;  // gradient-ready hooks in the last backward
  /// For each bucket of the last backward, how many gradient hooks had fired when its
  /// reduction started. A value below hooks_per_iteration is overlap with backward.
  std::vector<int> hooks_before_launch;
  double last_exposed_comm_seconds = 0;  // end-of-backward wait for the reductions
  double total_exposed_comm_seconds = 0;
  int64_t bytes_reduced_per_iteration = 0;  // gradient bytes in all buckets
  /// What the communication hook handed to collectives in the last backward (equal to
  /// bytes_reduced_per_iteration for plain all-reduce, less with compression).
  int64_t bytes_communicated_per_iteration = 0;
};

namespace detail {
struct ReducerInternals;  // src/reducer/reducer_internal.h: what ddp::Join needs of a Reducer
}  // namespace detail

/// Buckets, hooks and the end-of-backward finalisation for one module on one process group.
/// DistributedDataParallel drives it (ddp.h, which also states the threading contract); what is
/// public here is what a user calls: the communication hook, and what the reducer did.
class Reducer {
 public:
  /// Checks that every rank's module has the same parameters (count, names, shapes: the error
  /// names the first rank that differs and how), broadcasts rank 0's parameters and buffers,
  /// builds the buckets and installs the hooks.
  Reducer(std::shared_ptr<torch::nn::Module> module, std::shared_ptr<ProcessGroup> group,
          DDPOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Replaces the communication hook (default AllReduceHook); before the first backward.
  void set_comm_hook(std::unique_ptr<CommHook> hook);

  const ReducerStats& stats() const;
  /// The parameter names of each bucket, in bucket order (bucket 0 is reduced first).
  std::vector<std::vector<std::string>> bucket_parameter_names() const;

 private:
  template <typename ModuleType>
  friend class DistributedDataParallel;
  friend class NoSyncGuard;
  friend struct detail::ReducerInternals;

  /// Before the module's forward: reports an unfinished previous reduction (a parameter that
  /// got no gradient), rebuilds buckets once, broadcasts buffers, arms the hooks.
  void before_forward();
  /// With the forward's outputs: with find_unused_parameters, finds the parameters the outputs
  /// do not depend on.
  void after_forward(const std::vector<torch::Tensor>& outputs);

  struct Impl;
  std::shared_ptr<Impl> impl_;  // hooks hold a weak_ptr, so a hook outliving us does nothing
  bool sync_ = true;            // false inside no_sync(): backward does not communicate
};

}  // namespace ddp
