// Joining the job: rendezvous through a c10d store (init_method env://, tcp://host:port or
// file://path), then a c10d process group for the collectives (gloo on CPU; nccl and mpi where
// LibTorch has them). The collectives of DDP, ZeRO, SyncBatchNorm and Join go through this
// class, and c10d's differences between LibTorch versions stay in src/process_group/ and
// src/torch_compat.h; the elastic launcher and the fault-tolerant group also use c10d's stores.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>
#include <torch/arg.h>
#include <torch/types.h>

#include "ddp/debug/flight_recorder.h"
#include "ddp/world.h"

namespace c10d {
class Store;
class Work;
}  // namespace c10d

namespace ddp {

/// How to join: the PyTorch init_process_group arguments.
struct ProcessGroupOptions {
  /// "gloo" (CPU), "nccl" (CUDA builds), "mpi" (MPI builds).
  TORCH_ARG(std::string, backend) = "gloo";
  /// "env://", "tcp://host:port" or "file:///path".
  TORCH_ARG(std::string, init_method) = "env://";
  /// Overrides of the rank and world size the environment gives (-1: use the environment).
  TORCH_ARG(int, rank) = -1;
  TORCH_ARG(int, world_size) = -1;
  /// Limit for every collective; a peer that stops answering fails the job after this.
  TORCH_ARG(std::chrono::milliseconds, timeout) = std::chrono::minutes(5);
  /// Limit for all ranks to meet at the start (store reachable, every rank present).
  TORCH_ARG(std::chrono::milliseconds, rendezvous_timeout) = std::chrono::minutes(2);
  /// Local address for the collectives' sockets; empty: loopback when the master is loopback,
  /// else GLOO_SOCKET_IFNAME's interface, else the address that routes to the master.
  TORCH_ARG(std::string, bind_address);
  /// The device whose tensors the backend moves: the CPU for gloo and mpi; for nccl this rank's
  /// GPU (cuda:LOCAL_RANK, made the current device). Tensors on another device (the CPU-side
  /// flags and counts ddp.cpp exchanges) travel through a copy on this one.
  TORCH_ARG(torch::Device, device) = torch::kCPU;
  /// How long Work::wait() polls a collective for completion, yielding the core between polls,
  /// before it sleeps on it. On a VM, waking a sleeping thread can take longer than a small
  /// all-reduce, and the ranks drift apart after each such wake-up; polling avoids both
  /// (docs/performance.md has the figures). Zero (the default, as PyTorch's Gloo): sleep at once.
  TORCH_ARG(std::chrono::microseconds, spin_before_sleep) = std::chrono::microseconds(0);

  // Debugging a hung or failing job (flight_recorder.h, hang_analysis.h). The environment turns
  // them on for any program: DDP_DEBUG_DIR=DIR, DDP_DEBUG_COLLECTIVES=1, DDP_FLIGHT_RECORDS=N.
  /// Where this rank writes its flight record when a collective fails or times out, and on
  /// SIGTERM (empty: nowhere).
  TORCH_ARG(std::string, debug_dir);
  /// Before each collective, check that every rank issues the same one (operation, dtype,
  /// shape): a mismatch fails at once on every rank, naming both, instead of hanging or
  /// corrupting. Costs a store round trip per collective (docs/debugging.md).
  TORCH_ARG(bool, debug_collectives) = false;
  /// How many of the last collectives the flight recorder keeps (0: none).
  TORCH_ARG(int, flight_records) = 2000;
  /// What the group is, in its flight records (PyTorch's pg_config "desc"): FaultTolerantGroup
  /// says which generation, and what changed.
  TORCH_ARG(std::string, description) = "default_pg";
  /// Work::wait() polls the collective, so that ProcessGroup::abort() can end a wait on a peer
  /// that stopped answering (c10d's Gloo cannot cancel a collective). FaultTolerantGroup sets it.
  TORCH_ARG(bool, abortable) = false;
};

/// Shared by an abortable group and its Work: whether, and why, the group was aborted.
struct GroupAbort;

/// What a collective is part of, written into its flight record (flight_recorder.h): how the
/// error messages, the hang analysis and a timeline place it.
struct CollectiveTag {
  /// The DDP gradient bucket it reduces (GradBucket::index); -1: not a gradient bucket.
  int bucket = -1;
};

/// How reduce_scatter_single() combines the ranks' tensors.
enum class Reduction {
  kSum,
  /// The sum divided by the number of ranks: the backend's AVG where it is known to be right
  /// (NCCL), else a sum divided here when it completes (Gloo's AVG was missing before 2.x and
  /// wrong in some releases, pytorch/pytorch#162338).
  kAverage,
};

/// Handle on one asynchronous collective.
class Work {
 public:
  Work(Work&&) noexcept;
  Work& operator=(Work&&) noexcept;
  ~Work();
  /// Blocks until done; throws DistributedError naming the collective and rank on failure.
  void wait();
  /// Runs `finish` on the waiting thread once the collective is done (before wait() returns).
  /// Returns the Work by value: `auto&& w = group.allreduce(t).then(f);` keeps it alive.
  Work then(std::function<void()> finish) &&;

 private:
  friend class ProcessGroup;  // the only maker of a Work, from c10d's
  /// `spin_before_sleep`: see ProcessGroupOptions.
  /// `recorder` and `seq`: where the collective is recorded (completion, failure).
  Work(c10::intrusive_ptr<c10d::Work> work, std::string what, int rank,
       std::chrono::microseconds spin_before_sleep, std::shared_ptr<FlightRecorder> recorder,
       int64_t seq, std::shared_ptr<const GroupAbort> abort);
  /// Records the failure, writes the flight record, throws `error`.
  template <typename E>
  [[noreturn]] void failed(const E& error);

  c10::intrusive_ptr<c10d::Work> work_;
  std::function<void()> finish_;
  std::shared_ptr<FlightRecorder> recorder_;
  int64_t seq_ = 0;
  std::string what_;
  int rank_;
  std::chrono::microseconds spin_before_sleep_;
  std::shared_ptr<const GroupAbort> abort_;  // null unless the group is abortable
};

/// The ranks of one job and the collectives between them.
class ProcessGroup {
 public:
  /// Joins the job described by `options` and `world` (rank, world size and master come from
  /// `world` unless `options` overrides them). Throws InvalidArgument for a bad init method or
  /// backend, TimeoutError / DistributedError when the ranks cannot meet in time.
  static std::shared_ptr<ProcessGroup> init(const ProcessGroupOptions& options,
                                            const WorldInfo& world = WorldInfo::from_environment());

  /// A group over an existing store (tests: one thread per rank over a HashStore).
  static std::shared_ptr<ProcessGroup> init_with_store(c10::intrusive_ptr<c10d::Store> store,
                                                       int rank, int world_size,
                                                       const ProcessGroupOptions& options = {});

  ~ProcessGroup();

  /// Whether this build of LibTorch has `backend` ("gloo" always; "nccl" with CUDA; "mpi").
  static bool has_backend(const std::string& backend);

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& backend() const { return backend_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  /// Where the backend's tensors live (ProcessGroupOptions::device).
  torch::Device device() const { return device_; }

  /// Starts an in-place sum over all ranks of a dense tensor (float, double, half, bfloat16,
  /// integers). A communication hook passes its bucket's tag.
  Work allreduce(torch::Tensor& tensor, CollectiveTag tag = {});
  /// Starts an in-place max over all ranks.
  Work allreduce_max(torch::Tensor& tensor);
  /// Starts copying rank `root`'s `tensor` into every rank's `tensor`.
  Work broadcast(torch::Tensor& tensor, int root = 0);
  /// Starts gathering every rank's `input` into `output`, rank 0's first: output holds
  /// size() × input.numel() elements, both contiguous and of one dtype (c10d's
  /// all_gather_single, formerly _allgather_base).
  Work all_gather_single(torch::Tensor& output, torch::Tensor& input);
  /// Starts reducing `input` (size() × output.numel() elements) over all ranks; this rank's
  /// output gets the rank-th slice of the result (c10d's reduce_scatter_single, formerly
  /// _reduce_scatter_base).
  Work reduce_scatter_single(torch::Tensor& output, torch::Tensor& input,
                             Reduction op = Reduction::kSum);
  /// Every rank's `tensor`, in rank order (blocking).
  std::vector<torch::Tensor> allgather(const torch::Tensor& tensor);
  /// Waits until every rank has called barrier().
  void barrier();
  /// A barrier that names the ranks that did not arrive: rank 0 waits up to `timeout` for every
  /// rank, then every rank throws TimeoutError naming the missing ones ("start-up: rank(s) 2, 3
  /// did not arrive within 20 s"). Goes through the store, so it works when a backend is stuck.
  void monitored_barrier(std::chrono::milliseconds timeout, const std::string& what = "barrier");

  /// Ends this group (`abortable` only): every wait() on its collectives, running or to come,
  /// throws PeerFailure naming `reason`, and so does every new collective (monitored_barrier(),
  /// which goes through the store, is not one). The backend's own
  /// threads may stay blocked on the lost peer until the timeout: keep the group alive (its
  /// destructor would wait for them), and go on with a new one.
  void abort(const std::string& reason);
  bool aborted() const;
  /// This rank's record of its recent collectives.
  FlightRecorder& recorder() { return *recorder_; }

  /// The rendezvous store (for small out-of-band exchanges; keys get a unique prefix).
  c10d::Store& store() { return *store_; }
  /// A key prefix unique to this call on this rank and the same on every rank when ranks call
  /// it in the same order ("ddp/3/what/").
  std::string unique_prefix(const std::string& what);

 private:
  ProcessGroup() = default;
  void check_rendezvous(std::chrono::milliseconds timeout);
  /// The flight recorder, and the debugging options, once the group is connected.
  void start_recorder(const ProcessGroupOptions& options);
  bool needs_device_copy(const torch::Tensor& tensor) const;
  /// Records a collective about to be issued (after checking, with debug_collectives, that
  /// every rank issues the same); returns its seq.
  int64_t begin(const std::string& op, const torch::Tensor& tensor, CollectiveTag tag = {});
  /// Throws DistributedError when the ranks' `signature`s of collective `seq` differ.
  void check_same_collective(int64_t seq, const std::string& signature);
  /// `work` (collective `seq`) as this rank's Work: errors name the rank and `what`, waits poll
  /// as configured, completion is recorded.
  Work track(c10::intrusive_ptr<c10d::Work> work, std::string what, int64_t seq) const;
  /// Runs `collective` on a copy of `tensor` on device() and copies the result back when done.
  Work through_device(torch::Tensor& tensor, const std::function<Work(torch::Tensor&)>& collective);

  c10::intrusive_ptr<c10d::Store> store_;
  struct Backend;
  std::unique_ptr<Backend> backend_impl_;
  std::string backend_;
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_{0};
  std::chrono::microseconds spin_before_sleep_{0};
  torch::Device device_ = torch::kCPU;
  int prefix_counter_ = 0;
  std::shared_ptr<FlightRecorder> recorder_;
  bool debug_collectives_ = false;
  std::shared_ptr<GroupAbort> abort_;  // abortable groups only
};

/// Parses "tcp://host:port" into its parts; throws InvalidArgument naming the flag otherwise.
void parse_tcp_url(const std::string& url, std::string& host, int& port);

}  // namespace ddp
