// Per-step fault tolerance, after torchft: the ranks go on training when one of them dies, is cut
// off or freezes, without a restart. Each member heartbeats through the job's store; a member
// silent for `missed_heartbeats` intervals is lost, and the group's collectives are aborted at
// once (not after the collective timeout). A step counts only when every member votes that it
// went well (vote()); otherwise its gradients are thrown away, the survivors agree on the next
// membership through the store, build a new process group under a fresh store prefix
// (reconfigure()) and go on from the weights they hold, which DDP keeps the same on all of them.
// A process started later (join()) is admitted at a step boundary and takes the state from a live
// member (broadcast_bytes()).
//
//   auto ft = ddp::FaultTolerantGroup::start(store, rank, world_size, {});
//   auto model = std::make_unique<ddp::DistributedDataParallel<Net>>(net, ft->group());
//   for (each batch) {
//     bool ok = true;
//     try { forward, loss.backward(); } catch (const ddp::PeerFailure&) { ok = false; }
//     const ddp::StepVerdict verdict = ft->vote(ok);
//     if (verdict.commit) optimizer.step(); else optimizer.zero_grad();
//     if (verdict.reconfigure) {
//       ft->reconfigure();  // then: a new DistributedDataParallel over ft->group(), and the
//     }                     // newcomers' state (Membership::newcomers) from rank 0
//   }
//   ft->finish();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/intrusive_ptr.h>
#include <torch/arg.h>

#include "ddp/process_group.h"

namespace c10d {
class Store;
}

namespace ddp {

struct FaultToleranceOptions {
  /// How often each member says it is alive.
  TORCH_ARG(std::chrono::milliseconds, heartbeat_interval) = std::chrono::seconds(1);
  /// A member whose heartbeat has not moved for this many intervals is lost.
  TORCH_ARG(int, missed_heartbeats) = 3;
  /// Fewer members than this left: the job fails instead of going on.
  TORCH_ARG(int, min_size) = 1;
  /// How long a newcomer waits to be admitted. (A vote, or a new membership, waits at most the
  /// group's collective timeout for a member that is alive but does not come.)
  TORCH_ARG(std::chrono::milliseconds, join_timeout) = std::chrono::minutes(10);
  /// For each generation's process group (`abortable` is set whatever is given).
  TORCH_ARG(ProcessGroupOptions, group);
};

/// One generation of the group: who is in it, and what changed from the one before.
struct Membership {
  int64_t generation = 0;
  std::vector<std::string> members;  // in rank order: survivors keep their order
  int rank = 0;                      // this process's
  std::vector<std::string> lost;     // members of the generation before that are not here
  std::vector<std::string> joined;   // newcomers: they need the state from rank 0
  int64_t admitted = 0;              // newcomers admitted since the job began (numbered 1, 2, ...)
  std::string cause;                 // why the generation before ended (empty for the first)

  int size() const { return int(members.size()); }
  /// This process's name in the group: "r<rank>" for a first member, "j<n>" for a newcomer.
  const std::string& id() const { return members[size_t(rank)]; }
  bool is_newcomer(const std::string& id) const;
};

/// What the members agreed on at the end of a step.
struct StepVerdict {
  bool commit = false;       // every member's step went well: apply the update
  bool reconfigure = false;  // then reconfigure(): a member was lost, or a newcomer waits
};

class FaultTolerantGroup {
 public:
  /// The first members, `rank` of `world_size`, starting together (generation 1). `store` is the
  /// job's (a client of its TCPStore, or a FileStore); keys go under "ft/".
  static std::unique_ptr<FaultTolerantGroup> start(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                   int world_size,
                                                   const FaultToleranceOptions& options);
  /// A newcomer to a running job: waits until the members admit it at a step boundary, then
  /// must take the state from rank 0 (broadcast_bytes()). Returns null when the job finished
  /// first (a member called finish()); throws TimeoutError after join_timeout.
  static std::unique_ptr<FaultTolerantGroup> join(c10::intrusive_ptr<c10d::Store> store,
                                                  const FaultToleranceOptions& options);
  /// Whether the launcher asked for this group: launch() with on_failure "continue"
  /// (DDP_ON_FAILURE=continue).
  static bool requested(const WorldInfo& world = WorldInfo::from_environment());
  /// Whether the launcher started this worker to join the running job (DDP_NEWCOMER=1): its
  /// rank comes from the group once admitted, its state from a peer.
  static bool is_newcomer(const WorldInfo& world = WorldInfo::from_environment());
  /// As launch() with on_failure "continue" left it: the job's store (the launcher hosts it,
  /// so it outlives every worker), then join() for a newcomer (is_newcomer()), else
  /// start(). Throws InvalidArgument when the store would die with a worker (no launcher).
  static std::unique_ptr<FaultTolerantGroup> from_environment(
      const FaultToleranceOptions& options, const WorldInfo& world = WorldInfo::from_environment());
  ~FaultTolerantGroup();
  FaultTolerantGroup(const FaultTolerantGroup&) = delete;
  FaultTolerantGroup& operator=(const FaultTolerantGroup&) = delete;

  /// This generation's process group (replaced by reconfigure()).
  const std::shared_ptr<ProcessGroup>& group() const { return group_; }
  const Membership& membership() const { return membership_; }

  /// The end of a step: `ok` says whether this member's step went well (its collectives
  /// completed). Every member gets the same verdict. With `admit`, a newcomer waiting makes the
  /// verdict ask for a reconfiguration.
  StepVerdict vote(bool ok, bool admit = true);

  /// The next generation: the members of this one still alive, in their order, then (with
  /// `admit`) the newcomers waiting. Aborts the old group, keeps it alive (see
  /// ProcessGroup::abort) and builds the new one. Throws DistributedError when fewer than
  /// min_size are left, or when the others went on without this member (it was silent too long:
  /// frozen, or cut off; a newcomer must take its place).
  const Membership& reconfigure(bool admit = true);

  /// Runs `adopt` (what the program does on a new group: a new DistributedDataParallel, the
  /// state for the newcomers) until it completes on every member of one generation,
  /// reconfiguring when it fails somewhere. After reconfigure(), and for a newcomer after join().
  void settle(const std::function<void()>& adopt);

  /// Runs `phase` (collectives outside a step: an evaluation, an epoch's totals) until it
  /// completes on every member of one generation: when it fails on any, all reconfigure (no
  /// newcomer is admitted: they come in at a step), settle `adopt`, and run it again.
  void run_to_completion(const std::function<void()>& phase, const std::function<void()>& adopt);

  /// This member is done: its silence from now on is not a loss, and no newcomer is admitted
  /// any more.
  void finish();

 private:
  class Impl;
  explicit FaultTolerantGroup(std::unique_ptr<Impl> impl);
  void connect();
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<ProcessGroup> group_;
  Membership membership_;
};

/// Copies rank `root`'s `bytes` to every rank of `group` (its size first, then the bytes): how a
/// live member hands a newcomer the training state.
void broadcast_bytes(ProcessGroup& group, std::string& bytes, int root = 0);

}  // namespace ddp
