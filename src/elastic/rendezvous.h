// The elastic launchers' rendezvous (torchrun's --rdzv-backend c10d, with its behaviour): nodes
// meet in rounds through a TCPStore hosted by the agent on the endpoint's host. A round forms
// once MIN nodes are there and a last-call window has passed, at once with MAX nodes, or as soon
// as every live node of the previous round is back; a node arriving while a round runs waits and
// makes the running nodes start a new round. Each node's agent beats a heartbeat into the store;
// a node silent for keep_alive_max_attempt intervals is out (of a forming round, or of a running
// one, which then ends for a new round). Ranks keep their order from round to round.
//
// Where it differs from torchrun (docs/fault-tolerance.md): a dead participant of a forming round
// is dropped instead of keeping the round from completing (pytorch#111646); an agent that restarts
// its workers asks for a new round instead of closing the rendezvous under the others
// (pytorch#147064); a new round completes when every live node of the previous one is back,
// without waiting out the last call.
//
// The state is one text value under rdzv/<id>/state, changed by compare-and-set; the workers of
// round R meet under rdzv/<id>/round_R/. Internal to libddp (agent.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddp {

/// How a job's nodes meet: torchrun's --rdzv-endpoint, --rdzv-id, --nnodes MIN:MAX and
/// --rdzv-conf's keys.
struct RendezvousSettings {
  std::string host;  // the endpoint: its agent hosts the store
  int port = 29400;
  std::string run_id = "none";
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds join_timeout{600'000};
  std::chrono::milliseconds last_call{30'000};
  std::chrono::milliseconds keep_alive{5'000};
  int keep_alive_max_attempt = 3;
  std::string name = "launcher";  // the agent's name in its messages
};

/// One formed round, seen from one node.
struct Round {
  int64_t number = 0;
  std::vector<std::string> nodes;  // in node-rank order
  int node_rank = -1;              // this node's place in `nodes`
  std::string cause;               // why the round began (empty for the first)
  bool job_finished = false;       // join(): the job finished without this node (a spare)
  bool newcomer = false;           // join_running: this node joined the round while it ran
};

/// What became of a running round.
struct RoundStatus {
  enum Kind {
    kRunning,       ///< nothing changed
    kNewRound,      ///< a new round has begun (another node started it): join it
    kNodesWaiting,  ///< nodes arrived: a new round should take them in
    kNodeLost,      ///< a node of the round stopped beating
    kClosed,        ///< the job ended (finished, or failed for good): `cause` says how
  };
  Kind kind = kRunning;
  std::string cause;
};

class ElasticRendezvous {
 public:
  /// Connects to the endpoint's store, hosting it when the endpoint is one of this machine's
  /// addresses and its port is free; `node` names this node ("host:pid"). Starts the heartbeat.
  ElasticRendezvous(RendezvousSettings settings, std::string node);
  ~ElasticRendezvous();
  ElasticRendezvous(const ElasticRendezvous&) = delete;
  ElasticRendezvous& operator=(const ElasticRendezvous&) = delete;

  /// Joins the first round newer than `after` and waits for it to form. Throws TimeoutError after
  /// join_timeout (naming the nodes present), Error when the job is closed as failed, and returns
  /// an empty Round (number 0) when `stopped()` turns true while waiting, or one with
  /// job_finished when the job finished meanwhile. With `join_running` (--on-failure continue),
  /// a node arriving while a round runs joins that round at once, as a newcomer.
  Round join(int64_t after, const std::function<bool()>& stopped, bool join_running = false);
  /// The running round's news (a few store reads; call every monitor interval).
  RoundStatus check(const Round& round);
  /// Ends `round` for everyone so that a new one forms, unless another node already did. The
  /// cause is what every node prints.
  void next_round(const Round& round, const std::string& cause);
  /// This node leaves: out of the forming round or the waiting list; a running round it was in
  /// ends for a new one with `cause`.
  void leave(const std::string& cause);
  /// This node's workers of `round` succeeded. When every node's have, the job is closed as
  /// finished. Then waits until the job is closed (kClosed, with how) or a new round begins
  /// (kNewRound: join it); kRunning when `stopped()` turned true first.
  RoundStatus finish(const Round& round, const std::function<bool()>& stopped);
  /// --on-failure continue: takes the nodes of running `round` that stopped beating out of it,
  /// so that newcomers can take their places; returns them.
  std::vector<std::string> drop_lost(const Round& round);
  /// --on-failure continue: this node is done with `round` (its workers succeeded, or all
  /// failed). The job closes as finished once every node of the round is done or has stopped
  /// beating, and at least one succeeded. Returns how it closed (kClosed), or kRunning when
  /// `stopped()` turned true first.
  RoundStatus finish_surviving(const Round& round, bool succeeded,
                               const std::function<bool()>& stopped);
  /// The job is closed and this node goes; its mark that it is gone is its last use of the store.
  /// The store's host first waits (at most 10 s) for every other node to have read that (the
  /// round's, newcomers that joined it since, spares, and the nodes of a round begun after it),
  /// each until it is gone or its heartbeat stops, so that none finds the store gone; then for
  /// the agents of other jobs at the same endpoint to leave (or stop beating), unless
  /// `stopped()`.
  void depart(const Round& round, const std::function<bool()>& stopped);
  /// Ends the job for every node with `cause` (a failure that used up its restarts).
  void close(const std::string& cause);
  /// Empty while the store answers; otherwise why this node has lost it (its heartbeat failed
  /// keep_alive_max_attempt times in a row).
  std::string lost_store() const;
  /// The store prefix of `round`'s workers.
  std::string worker_prefix(const Round& round) const;
  /// The key, outside every round's prefix, under which each round's rank 0 keeps its progress.
  std::string progress_key() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp
