// Communication hooks: what DistributedDataParallel does with a full bucket of gradients. The
// default all-reduces it and divides by the world size; other hooks (compression, ...) plug into
// the same two verbs: start() as soon as the bucket is full, wait() at the end of backward.
#pragma once

#include <memory>
#include <string>

#include <torch/types.h>

namespace ddp {

class ProcessGroup;

/// One bucket of gradients: a flat tensor whose slices are the parameters' .grad.
struct GradBucket {
  int index = 0;
  torch::Tensor buffer;  // reduced in place
  bool is_last = false;
};

/// A reduction in flight.
class PendingReduction {
 public:
  virtual ~PendingReduction() = default;
  /// Blocks until the bucket's buffer holds the average of every rank's gradients.
  virtual void wait() = 0;
};

/// Reduces buckets across ranks; one instance per DistributedDataParallel.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Starts reducing `bucket` (called on the backward thread; must not block on the network).
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

}  // namespace ddp
