#include "ddp/algorithms/comm_hook.h"

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "ddp/process_group.h"

namespace ddp {
namespace {

int64_t bytes_of(const torch::Tensor& t) { return t.numel() * int64_t(t.element_size()); }

class PendingAllReduce : public PendingReduction {
 public:
  PendingAllReduce(Work work, torch::Tensor buffer, int world_size)
      : PendingReduction(bytes_of(buffer)),
        work_(std::move(work)),
        buffer_(std::move(buffer)),
        world_size_(world_size) {}
  void wait() override {
    work_.wait();
    // Averaging after the sum keeps the division off the backward thread's critical path.
    buffer_.div_(world_size_);
  }

 private:
  Work work_;
  torch::Tensor buffer_;
  int world_size_;
};

class PendingCast : public PendingReduction {
 public:
  PendingCast(Work work, torch::Tensor wire, torch::Tensor buffer)
      : PendingReduction(bytes_of(wire)),
        work_(std::move(work)),
        wire_(std::move(wire)),
        buffer_(std::move(buffer)) {}
  void wait() override {
    work_.wait();
    buffer_.copy_(wire_);
  }

 private:
  Work work_;
  torch::Tensor wire_;
  torch::Tensor buffer_;
};

}  // namespace

std::unique_ptr<PendingReduction> AllReduceHook::start(GradBucket& bucket, ProcessGroup& group) {
  return std::make_unique<PendingAllReduce>(
      group.allreduce(bucket.buffer, CollectiveTag{bucket.index}), bucket.buffer, group.size());
}

CastHook::CastHook(torch::ScalarType wire_type) : wire_type_(wire_type) {
  if (wire_type != torch::kHalf && wire_type != torch::kBFloat16) {
    throw InvalidArgument(c10::str("CastHook: the wire type must be Half or BFloat16, not ",
                                   c10::toString(wire_type)));
  }
}

std::unique_ptr<PendingReduction> CastHook::start(GradBucket& bucket, ProcessGroup& group) {
  // Dividing before the cast (in the gradients' own precision) keeps large sums from
  // overflowing fp16's range of 65504.
  torch::Tensor wire = bucket.buffer.div(group.size()).to(wire_type_);
  Work work = group.allreduce(wire, CollectiveTag{bucket.index});
  return std::make_unique<PendingCast>(std::move(work), std::move(wire), bucket.buffer);
}

std::string CastHook::name() const { return wire_type_ == torch::kHalf ? "fp16" : "bf16"; }

}  // namespace ddp
