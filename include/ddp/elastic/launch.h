// The worker launcher (what torchrun's agent does, in-process): starts N workers of a
// program with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT), prefixes their output
// with [rank N], and tears the whole group down when any worker fails: SIGTERM, then SIGKILL
// after a grace period, the failed rank named with how it ended and its last stderr lines, and,
// with a debug directory, the verdict of the workers' flight records.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include "ddp/elastic/cpu_binding.h"

namespace ddp {

/// What to start and how to watch it.
struct LaunchOptions {
  TORCH_ARG(int, nproc_per_node) = 1;
  TORCH_ARG(int, nnodes) = 1;
  TORCH_ARG(int, node_rank) = 0;
  /// Rank 0's host; every node must reach it. Default: loopback (one node).
  TORCH_ARG(std::string, master_addr) = "127.0.0.1";
  /// 0: pick a free port (one node only).
  TORCH_ARG(int, master_port) = 0;
  /// Restarts of the whole local group after a failure (a failure of this node's workers; with
  /// rdzv_backend "c10d" a node lost or added is a membership change and uses up none).
  TORCH_ARG(int, max_restarts) = 0;
  /// A worker fails: "restart" every worker (from the newest checkpoint, up to max_restarts),
  /// or "continue": the others go on without it at once (they form a FaultTolerantGroup:
  /// fault_tolerance.h), and a newcomer replaces it while max_restarts allows. Needs one node,
  /// or rdzv_backend "c10d" (the launcher must host the store).
  TORCH_ARG(std::string, on_failure) = "restart";
  /// How the nodes meet: "static" (nnodes fixed, each given its node_rank and rank 0's
  /// master_addr/master_port) or "c10d", torchrun's elastic rendezvous: between min_nodes and
  /// nnodes nodes meet in rounds at rdzv_endpoint, each round's world made of those present
  /// (src/elastic/rendezvous.h, docs/fault-tolerance.md).
  TORCH_ARG(std::string, rdzv_backend) = "static";
  /// c10d: HOST:PORT of the rendezvous store, hosted by the agent started on HOST.
  TORCH_ARG(std::string, rdzv_endpoint);
  /// c10d: the job's name; jobs with another id at the same endpoint do not mix.
  TORCH_ARG(std::string, rdzv_id) = "none";
  /// c10d: the fewest nodes a round starts with (0: nnodes, a fixed size).
  TORCH_ARG(int, min_nodes) = 0;
  /// c10d: seconds a node waits for a round to form before it gives up (torchrun's
  /// join_timeout).
  TORCH_ARG(double, join_timeout) = 600;
  /// c10d: seconds a round with at least min_nodes waits for more (torchrun's
  /// last_call_timeout).
  TORCH_ARG(double, last_call) = 30;
  /// c10d: seconds between a node's heartbeats; a node silent for keep_alive_max_attempt of them
  /// is out.
  TORCH_ARG(double, keep_alive) = 5;
  TORCH_ARG(int, keep_alive_max_attempt) = 3;
  /// c10d: seconds between two looks at the rendezvous while the workers run.
  TORCH_ARG(double, monitor_interval) = 0.1;
  /// Seconds between SIGTERM and SIGKILL when stopping workers.
  TORCH_ARG(double, grace_seconds) = 5;
  /// Per-rank log files rank_N.log here (empty: none).
  TORCH_ARG(std::string, log_dir);
  /// Show only rank 0's output on the console (all ranks still go to the log files).
  TORCH_ARG(bool, console_rank0_only) = false;
  /// The workers' debug directory (DDP_DEBUG_DIR; empty: the launcher's own DDP_DEBUG_DIR, if
  /// any). When the job fails or is stopped, the launcher reads the flight records the workers
  /// wrote there and names the rank the others waited for (hang_analysis.h).
  TORCH_ARG(std::string, debug_dir);
  /// kCores: each worker runs only on its local rank's share of the launcher's CPUs (cpu_share),
  /// and the workers are told so (launched_with_cpu_binding() is true in them), so that a worker
  /// can size its thread pool to its share rather than to the node.
  TORCH_ARG(CpuBind, cpu_bind) = CpuBind::kNone;
  /// Lines of a failed worker's stderr to print.
  TORCH_ARG(int, tail_lines) = 20;
  /// The program and its arguments.
  TORCH_ARG(std::vector<std::string>, command);
  /// Name used in the launcher's own messages (a program sets its own).
  TORCH_ARG(std::string, name) = "launcher";
};

/// The exit status of a worker that failed only because another rank did (a collective lost its
/// peer or timed out: a PeerFailure; a program should exit with it then). When a worker ends with
/// it, the launcher waits up to a second for a worker of its node that failed otherwise and names
/// that one as the cause, as torchrun names the first failure. 75 is sysexits' EX_TEMPFAIL.
constexpr int kExitPeerFailure = 75;

/// Runs the workers to completion; returns the launcher's exit code: 0 when every worker
/// succeeded, 1 when one failed (after max_restarts), 128+signal when the launcher was stopped
/// by SIGINT/SIGTERM. Throws InvalidArgument for inconsistent options, IoError or Error when the
/// workers cannot be started. However it ends, it leaves nothing behind: every worker it started
/// has been reaped, the SIGINT/SIGTERM handlers it found are back, its temporary files are gone.
int launch(const LaunchOptions& options);

/// In a worker: whether the launcher's stdout, where this process's output ends up, is a
/// terminal (the worker's own stdout is a pipe to the launcher, so isatty() cannot tell). The
/// launcher says so in DDP_STDOUT_TTY; set outside, that variable passes through to the workers
/// ("0": not a terminal). nullopt when it is not set: not started by a launcher that relays to a
/// terminal, so the process's own stdout is what to ask.
std::optional<bool> launcher_stdout_is_terminal();

/// The signal's name ("SIGKILL"), or "signal N".
std::string signal_name(int signal);

}  // namespace ddp
