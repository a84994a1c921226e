// Who this process is in the job: rank, world size, local rank and where the master is, read
// from the environment a launcher left (the variables: environment.h). Launchers are tried in a
// fixed, documented order:
//   1. torchrun and launch() (launch.h): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//      GROUP_RANK, MASTER_ADDR, MASTER_PORT
//   2. Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or
//      SLURM_TASKS_PER_NODE, SLURM_NODEID; master = MASTER_ADDR or the first host of
//      SLURM_JOB_NODELIST (SLURM_NODELIST)
//   3. Open MPI (mpirun): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//      OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE; master = MASTER_ADDR
//   4. none of these: a single process, rank 0 of 1.
#pragma once

#include <map>
#include <memory>
#include <string>

namespace ddp {

struct LauncherHandshake;  // src/launcher_handshake.h

/// This process's place in the job.
struct WorldInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;  // node index
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_port_set = false;  // MASTER_PORT (or the launcher's) was given
  int restart_count = 0;         // TORCHELASTIC_RESTART_COUNT
  bool agent_store = false;      // TORCHELASTIC_USE_AGENT_STORE=True: the launcher hosts the store
  std::string source = "default";  // "torchrun", "slurm", "openmpi" or "default"
  /// What ddp.cpp's own launcher adds for the library (its store, failure handling, elastic
  /// progress): opaque here, null where there is none; the public views of it are
  /// FaultTolerantGroup::requested() and is_newcomer(), and JobProgress::round_cause().
  std::shared_ptr<const LauncherHandshake> launcher;

  /// Reads the process environment (see the file comment); throws InvalidArgument naming the
  /// variable when one is malformed or inconsistent (e.g. RANK >= WORLD_SIZE).
  static WorldInfo from_environment();
  /// The same from an explicit map, for tests.
  static WorldInfo from_map(const std::map<std::string, std::string>& env);
};

/// The first host of a Slurm node list: "node[03-05,7],gpu1" → "node03".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace ddp
