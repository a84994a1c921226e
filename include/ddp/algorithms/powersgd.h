// PowerSGD gradient compression (Vogels et al., 2019, "PowerSGD: Practical Low-Rank Gradient
// Compression for Distributed Optimization"), the algorithm of PyTorch's powerSGD_hook:
//
//   every gradient of a bucket with 2+ dimensions is viewed as an n x m matrix M; when a rank-r
//   approximation is worth it ((n + m) r * min_compression_rate < n m), each rank computes
//   P = M Q, the Ps are summed across ranks and orthogonalised, Q = M^T P is averaged across
//   ranks, and M is replaced by P Q^T. The other gradients are all-reduced uncompressed.
//   Error feedback adds what the approximation missed last step to this step's gradient; Q is
//   warm-started from the previous step. The first start_iter steps are plain all-reduces.
//
// One all-reduce of P and of the uncompressed rest starts as soon as the bucket is full; the
// all-reduce of Q, which needs P, runs at the end of backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "ddp/algorithms/comm_hook.h"

namespace ddp {

/// Options of PowerSGDHook, named after PyTorch's PowerSGDState.
struct PowerSGDOptions {
  /// r: the rank of each approximation. Higher is more accurate and sends more.
  TORCH_ARG(int, matrix_approximation_rank) = 1;
  /// Steps of plain all-reduce before compression starts (PyTorch's start_powerSGD_iter).
  TORCH_ARG(int64_t, start_iter) = 1000;
  /// A matrix is compressed only when its approximation is this many times smaller.
  TORCH_ARG(double, min_compression_rate) = 2.0;
  TORCH_ARG(bool, use_error_feedback) = true;
  /// Start each step's Q from the last step's instead of from random numbers.
  TORCH_ARG(bool, warm_start) = true;
  /// Added to each column's norm when orthogonalising (0 as in PyTorch; zero columns stay zero).
  TORCH_ARG(double, orthogonalization_epsilon) = 0.0;
  /// Seed of the initial Qs; the same on every rank so the Ps can be summed.
  TORCH_ARG(uint64_t, seed) = 0;
};

/// The options a spec's arguments "RANK[:START]" give (the part after "powersgd:"; empty: the
/// defaults, except that compression starts after 100 steps). Throws InvalidArgument naming them.
PowerSGDOptions powersgd_options_from_spec(const std::string& arguments);

class PowerSGDHook : public CommHook {
 public:
  explicit PowerSGDHook(PowerSGDOptions options = {});
  ~PowerSGDHook() override;
  std::unique_ptr<PendingReduction> start(GradBucket& bucket, ProcessGroup& group) override;
  std::string name() const override;

  /// The error-feedback residual of bucket `index` (undefined before compression starts).
  torch::Tensor error(int index) const;

  struct BucketState;

 private:
  /// Bucket `bucket`'s state, new when the bucket is new or was rebuilt.
  std::shared_ptr<BucketState> state_of(const GradBucket& bucket);

  PowerSGDOptions options_;
  std::vector<std::shared_ptr<BucketState>> buckets_;  // by bucket index
  int64_t iteration_ = 0;  // backward passes seen so far (counted at each last bucket)
};

/// Gram-Schmidt on the columns of `matrix` (n x r, in place), as PyTorch's _orthogonalize.
void orthogonalize_columns(torch::Tensor& matrix, double epsilon = 0.0);

}  // namespace ddp
