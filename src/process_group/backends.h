// The c10d backends a ProcessGroup can run on, one file each (gloo.cpp, nccl.cpp, mpi.cpp):
// each says whether this LibTorch has it and connects it over a rendezvous store.
// Internal to libddp.
#pragma once

#include <exception>
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
  bool compiled;          // in this LibTorch
  bool reduces_bfloat16;  // else ProcessGroup all-gathers bfloat16 and sums it in float
  Connected (*connect)(const ConnectArgs&);
};

// Each throws InvalidArgument saying why when it cannot be used (not in this LibTorch, options
// it cannot work with), DistributedError when it cannot connect.
Connected connect_gloo(const ConnectArgs& args);
Connected connect_nccl(const ConnectArgs& args);
Connected connect_mpi(const ConnectArgs& args);

/// `options` with the address Gloo binds to (the others ignore it): as given, else none where
/// GLOO_SOCKET_IFNAME names an interface or the master is this machine, else the local address
/// the kernel routes to the master by, so that a multi-homed node is reachable by its peers.
ProcessGroupOptions with_bind_address(ProcessGroupOptions options, const std::string& master_host,
                                      int master_port);

/// Whether `error`, thrown by a collective's wait, is a backend's word for a broken connection
/// to a peer (Gloo's IoException) rather than a failure of the collective itself.
bool is_broken_connection(const std::exception& error);

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
  static const std::vector<BackendEntry> entries = {
      {"gloo", true, compat::kGlooReducesBFloat16, connect_gloo},
      {"nccl", kNcclCompiled, true, connect_nccl},
      {"mpi", kMpiCompiled, true, connect_mpi}};
  return entries;
}

}  // namespace ddp::backends
