// What a ProcessGroup's two halves share (process_group.cpp joins, collectives.cpp runs the
// collectives): its backend and its abort flag. Internal to libddp.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "ddp/process_group.h"
#include "torch_compat.h"

namespace ddp {

struct GroupAbort {
  std::atomic<bool> set{false};
  mutable std::mutex mutex;
  std::string reason;  // under `mutex`, written once before `set`

  std::string why() const {
    std::lock_guard<std::mutex> lock(mutex);
    return reason;
  }
};

struct ProcessGroup::Backend {
  c10::intrusive_ptr<compat::CollectiveBackend> group;  // gloo, nccl or mpi
  bool reduces_bfloat16 = true;                         // its BackendEntry's
};

}  // namespace ddp
