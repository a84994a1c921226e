// Communication hooks: what DistributedDataParallel does with a full bucket of gradients. The
// default all-reduces it and divides by the world size; other hooks plug into the same two verbs:
// start() as soon as the bucket is full, wait() at the end of backward. Here: the default, and
// fp16/bf16 compression (cast, all-reduce, cast back). PowerSGD is in ddp/algorithms/powersgd.h;
// hooks by name ("powersgd:2") in ddp/algorithms/comm_hook_registry.h.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

namespace ddp {

class ProcessGroup;

/// One bucket of gradients: a flat tensor whose slices are the parameters' .grad.
struct GradBucket {
  int index = 0;
  torch::Tensor buffer;  // reduced in place
  /// Each parameter's gradient as a view of `buffer`, shaped like the parameter.
  std::vector<torch::Tensor> gradients;
  bool is_last = false;  // the last bucket of this backward
};

/// A reduction in flight.
class PendingReduction {
 public:
  /// `payload_bytes`: what this rank hands to collectives for the bucket (a ring all-reduce
  /// puts 2(W-1)/W times that on the wire).
  explicit PendingReduction(int64_t payload_bytes) : payload_bytes_(payload_bytes) {}
  virtual ~PendingReduction() = default;
  /// Blocks until the bucket's buffer holds the average of every rank's gradients.
  virtual void wait() = 0;
  int64_t payload_bytes() const { return payload_bytes_; }

 private:
  int64_t payload_bytes_;
};

/// Reduces buckets across ranks; one instance per DistributedDataParallel.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Starts reducing `bucket` (called on the backward thread; must not block on the network).
  /// Collectives for the bucket take CollectiveTag{bucket.index}, so that its flight record (and
  /// a timeline drawn from it) names the bucket.
  virtual std::unique_ptr<PendingReduction> start(GradBucket& bucket, ProcessGroup& group) = 0;
  /// The hook's name, for logs ("allreduce").
  virtual std::string name() const = 0;
};

/// The default: sum over ranks with one all-reduce, then divide by the world size.
class AllReduceHook : public CommHook {
 public:
  std::unique_ptr<PendingReduction> start(GradBucket& bucket, ProcessGroup& group) override;
  std::string name() const override { return "allreduce"; }
};

/// Compression to a 16-bit float type (torch::kHalf or torch::kBFloat16): each rank divides its
/// gradients by the world size, casts them, the casts are summed across ranks, and the sum is
/// cast back into the bucket. Half the bytes of AllReduceHook, at 16-bit precision.
class CastHook : public CommHook {
 public:
  explicit CastHook(torch::ScalarType wire_type);
  std::unique_ptr<PendingReduction> start(GradBucket& bucket, ProcessGroup& group) override;
  std::string name() const override;

 private:
  torch::ScalarType wire_type_;
};

}  // namespace ddp
