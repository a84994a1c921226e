// The c10d backends a ProcessGroup can run on, one file each (process_group_gloo.cpp, _nccl.cpp,
// _mpi.cpp): each says whether this LibTorch has it and connects it over a rendezvous store.
// Internal to libddp.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ddp/process_group.h"
#include "torch_compat.h"

namespace ddp::backends {

/// What connecting a backend takes. `rendezvous` checks that every rank reached the store; a
/// backend calls it once its own options are known to be usable, before it connects.
struct ConnectArgs {
  c10::intrusive_ptr<c10d::Store> store;  // prefixed for the backend's keys
  int rank = 0;
  int size = 1;
  const ProcessGroupOptions& options;
  std::function<void()> rendezvous;
};

using Connected = c10::intrusive_ptr<compat::CollectiveBackend>;

struct BackendEntry {
  const char* name;
  bool compiled;  // in this LibTorch
  Connected (*connect)(const ConnectArgs&);
};

// Each throws InvalidArgument saying why when it cannot be used (not in this LibTorch, options
// it cannot work with), DistributedError when it cannot connect.
Connected connect_gloo(const ConnectArgs& args);
Connected connect_nccl(const ConnectArgs& args);
Connected connect_mpi(const ConnectArgs& args);

#if defined(USE_C10D_NCCL)
constexpr bool kNcclCompiled = true;
#else
constexpr bool kNcclCompiled = false;
#endif
#if defined(USE_C10D_MPI)
constexpr bool kMpiCompiled = true;
#else
constexpr bool kMpiCompiled = false;
#endif

/// Every backend, gloo first.
inline const std::vector<BackendEntry>& all() {
  static const std::vector<BackendEntry> entries = {{"gloo", true, connect_gloo},
                                                    {"nccl", kNcclCompiled, connect_nccl},
                                                    {"mpi", kMpiCompiled, connect_mpi}};
  return entries;
}

}  // namespace ddp::backends
