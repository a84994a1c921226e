#include "ddp/comm_hook.h"

#include "ddp/process_group.h"

namespace ddp {
namespace {

class PendingAllReduce : public PendingReduction {
 public:
  PendingAllReduce(Work work, torch::Tensor buffer, int world_size)
      : work_(std::move(work)), buffer_(std::move(buffer)), world_size_(world_size) {}
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

}  // namespace

std::unique_ptr<PendingReduction> AllReduceHook::start(GradBucket& bucket, ProcessGroup& group) {
  return std::make_unique<PendingAllReduce>(group.allreduce(bucket.buffer), bucket.buffer,
                                            group.size());
}

}  // namespace ddp
