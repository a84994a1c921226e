// What ddp.cpp's own launcher (launch.h) tells its workers beyond torchrun's variables, for the
// library's use only: where the workers' store is, and how the job handles failures and
// membership changes. WorldInfo::from_environment() reads it with the rest (world.cpp) and
// carries it opaquely (WorldInfo::launcher); ProcessGroup::init, FaultTolerantGroup and
// JobProgress read it here. The variables: environment.h's DDP_STORE_FILE to DDP_ROUND_CAUSE.
#pragma once

#include <string>

#include "ddp/world.h"

namespace ddp {

struct LauncherHandshake {
  /// The workers' keys in the agent's store are under this prefix: DDP_STORE_PREFIX, else, as
  /// torchrun's workers, "/worker/attempt_<restart count>" (so restarts never share keys).
  std::string store_prefix;
  /// DDP_STORE_FILE: launch() on one node rendezvouses through this file instead of a port.
  std::string store_file;
  /// DDP_ON_FAILURE=continue: the job goes on without a lost worker (FaultTolerantGroup).
  bool fault_tolerant = false;
  /// DDP_NEWCOMER=1: this worker joins the running job; its rank comes from the group.
  bool newcomer = false;
  /// DDP_PROGRESS_KEY and DDP_ROUND_CAUSE: an elastic agent's (JobProgress, job_progress.h).
  std::string progress_key, round_cause;
};

/// `world`'s handshake, or an empty one where no launcher of ddp.cpp's left any (a WorldInfo
/// built by hand, Slurm, Open MPI).
inline const LauncherHandshake& handshake_of(const WorldInfo& world) {
  static const LauncherHandshake none;
  return world.launcher ? *world.launcher : none;
}

}  // namespace ddp
