// Every environment variable the library reads or sets, named once, with what it means. The code
// names a variable only through these constants, so that this list is complete; the launchers'
// conventions are torchrun's, Slurm's and Open MPI's. The programs' own few (the trainer's fault
// injection, the fuzzer's seeds) are in apps/common/app_environment.h.
#pragma once

namespace ddp::env {

// --- Who a worker is: set by a launcher (torchrun, launch()), read by
// --- WorldInfo::from_environment() (world.h).

/// This process's rank in the job, 0 to WORLD_SIZE - 1.
inline constexpr char kRank[] = "RANK";
/// The number of processes in the job.
inline constexpr char kWorldSize[] = "WORLD_SIZE";
/// This process's rank among the workers of its node (its GPU, by default).
inline constexpr char kLocalRank[] = "LOCAL_RANK";
/// The number of workers on this node.
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
/// The index of this node among the job's nodes.
inline constexpr char kGroupRank[] = "GROUP_RANK";
/// The host of rank 0's TCPStore, for the init method env://.
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
/// The port of rank 0's TCPStore, for the init method env://.
inline constexpr char kMasterPort[] = "MASTER_PORT";
/// How many times the launcher has restarted the workers (0 at the first start).
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
/// "True", "true" or "1": torchrun's agent hosts the TCPStore, so rank 0 joins it as a client.
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
/// A FileStore's path that a launcher on one node gives its workers instead of a port.
inline constexpr char kStoreFile[] = "DDP_STORE_FILE";
/// The key prefix of the workers' keys in the agent's store (an elastic launcher's round).
inline constexpr char kStorePrefix[] = "DDP_STORE_PREFIX";
/// "continue": the launcher keeps the survivors running when a worker fails
/// (LaunchOptions::on_failure "continue"); the workers form a FaultTolerantGroup
/// (fault_tolerance.h).
inline constexpr char kOnFailure[] = "DDP_ON_FAILURE";
/// "1": this worker replaces a lost one in a running fault-tolerant job (FaultTolerantGroup::join).
inline constexpr char kNewcomer[] = "DDP_NEWCOMER";
/// The key in the elastic agent's store, outside any round's prefix, where rank 0 keeps how far
/// the job has got, so that the next round can say what a restart lost (job_progress.h).
inline constexpr char kProgressKey[] = "DDP_PROGRESS_KEY";
/// Why the elastic agent began this round: the membership change or failure that ended the last.
inline constexpr char kRoundCause[] = "DDP_ROUND_CAUSE";

// --- Slurm's (srun) and Open MPI's (mpirun) names for the same, read where RANK is absent.

inline constexpr char kSlurmProcId[] = "SLURM_PROCID";                  ///< rank
inline constexpr char kSlurmNtasks[] = "SLURM_NTASKS";                  ///< world size
inline constexpr char kSlurmLocalId[] = "SLURM_LOCALID";                ///< local rank
inline constexpr char kSlurmNodeId[] = "SLURM_NODEID";                  ///< node index
inline constexpr char kSlurmNtasksPerNode[] = "SLURM_NTASKS_PER_NODE";  ///< local world size
/// Tasks on each node, e.g. "2(x3)": the local world size where SLURM_NTASKS_PER_NODE is absent.
inline constexpr char kSlurmTasksPerNode[] = "SLURM_TASKS_PER_NODE";
/// The job's hosts, e.g. "node[01-04]": the first is the master where MASTER_ADDR is absent.
inline constexpr char kSlurmJobNodelist[] = "SLURM_JOB_NODELIST";
inline constexpr char kSlurmNodelist[] = "SLURM_NODELIST";  ///< older Slurm's name for it
/// The job's number: the master's port, where MASTER_PORT is absent, is 15000 + its last four
/// digits (PyTorch Lightning's rule), the same on every task and different for concurrent jobs.
inline constexpr char kSlurmJobId[] = "SLURM_JOB_ID";
inline constexpr char kOmpiRank[] = "OMPI_COMM_WORLD_RANK";             ///< rank
inline constexpr char kOmpiSize[] = "OMPI_COMM_WORLD_SIZE";             ///< world size
inline constexpr char kOmpiLocalRank[] = "OMPI_COMM_WORLD_LOCAL_RANK";  ///< local rank
inline constexpr char kOmpiLocalSize[] = "OMPI_COMM_WORLD_LOCAL_SIZE";  ///< local world size

// --- Set by ddp.cpp's launcher (launch.h) for its workers.

/// "cores": the launcher bound this worker to its share of the CPUs (LaunchOptions::cpu_bind).
inline constexpr char kCpuBind[] = "DDP_CPU_BIND";
/// "1" or "0": whether the launcher's own stdout is a terminal (the worker's is a pipe to it), so
/// that a worker knows whether a progress line that rewrites itself will be seen as one.
inline constexpr char kStdoutTty[] = "DDP_STDOUT_TTY";

// --- Debugging (process_group.h, flight_recorder.h), set by the user or the launcher.

/// A folder: each rank writes its flight record there on a failure, a timeout or SIGTERM.
inline constexpr char kDebugDir[] = "DDP_DEBUG_DIR";
/// Not empty and not "0": every collective is first compared across the ranks through the store.
inline constexpr char kDebugCollectives[] = "DDP_DEBUG_COLLECTIVES";
/// How many collectives each rank's flight recorder keeps (0 to 10,000,000).
inline constexpr char kFlightRecords[] = "DDP_FLIGHT_RECORDS";

// --- Tuning, set by the user.

/// The folder under which the launcher makes its rendezvous folder (as for mkdtemp; else /tmp).
inline constexpr char kTmpDir[] = "TMPDIR";

/// "0" turns the CPU tensor cache (allocator.h) off; "1", the default, leaves it on.
inline constexpr char kCpuTensorCache[] = "DDP_CPU_TENSOR_CACHE";
/// glibc's malloc tuning: if any of the three is set, retain_freed_memory() leaves malloc alone.
inline constexpr char kMallocMmapMax[] = "MALLOC_MMAP_MAX_";
inline constexpr char kMallocMmapThreshold[] = "MALLOC_MMAP_THRESHOLD_";
inline constexpr char kMallocTrimThreshold[] = "MALLOC_TRIM_THRESHOLD_";
/// The network interface Gloo binds to (e.g. "eth0"); else the route to the store's host decides.
inline constexpr char kGlooSocketIfname[] = "GLOO_SOCKET_IFNAME";
/// Intra-op threads per worker where the program is not told otherwise.
inline constexpr char kOmpNumThreads[] = "OMP_NUM_THREADS";
/// LibTorch's cap on its kernels' instruction set ("default", "avx2", "avx512"); ddp.cpp's own
/// vectorised loops (the image resampler) follow it too, so scripts/cpu-tier.sh plays an older
/// CPU for both.
inline constexpr char kAtenCpuCapability[] = "ATEN_CPU_CAPABILITY";
/// OpenBLAS's kernel set (e.g. "Haswell"); bench-ceiling raises it to "SkylakeX" where the CPU
/// has AVX-512 and the machine asked for less, to measure the real ceiling.
inline constexpr char kOpenblasCoretype[] = "OPENBLAS_CORETYPE";
/// The GPUs a process may see (CUDA's own variable; named in messages about missing GPUs).
inline constexpr char kCudaVisibleDevices[] = "CUDA_VISIBLE_DEVICES";

}  // namespace ddp::env
