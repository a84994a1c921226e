#include "elastic/agent.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <variant>

#include <c10/util/StringUtil.h>

#include "ddp/debug/flight_recorder.h"
#include "ddp/debug/hang_analysis.h"
#include "ddp/environment.h"
#include "ddp/error.h"
#include "elastic/launch_workers.h"
#include "elastic/rendezvous.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(int64_t(seconds * 1000));
}

// This node's name in the rendezvous: unique per agent, so a restarted node is a new one.
std::string node_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return c10::str(host, ":", ::getpid());
}

std::string clock_text() {
  const std::time_t now = std::time(nullptr);
  char text[16];
  std::strftime(text, sizeof text, "%H:%M:%S", std::localtime(&now));
  return text;
}

RendezvousSettings settings_of(const LaunchOptions& o) {
  RendezvousSettings s;
  std::tie(s.host, s.port) = parse_endpoint(o.rdzv_endpoint());
  s.run_id = o.rdzv_id();
  s.min_nodes = o.min_nodes() > 0 ? o.min_nodes() : o.nnodes();
  s.max_nodes = o.nnodes();
  s.join_timeout = ms(o.join_timeout());
  s.last_call = ms(o.last_call());
  s.keep_alive = ms(o.keep_alive());
  s.keep_alive_max_attempt = o.keep_alive_max_attempt();
  s.name = o.name();
  return s;
}

// One line, and with a log directory one record of membership.jsonl, per round this node runs.
class MembershipLog {
 public:
  explicit MembershipLog(const LaunchOptions& o) : o_(o) {}
  void round_begins(const Round& r) {
    const int world = int(r.nodes.size()) * o_.nproc_per_node();
    const int first = r.node_rank * o_.nproc_per_node();
    std::fprintf(stderr,
                 "%s: [%s] round %lld: %zu node(s), world size %d%s; this node is node %d, "
                 "ranks %d-%d%s%s\n",
                 o_.name().c_str(), clock_text().c_str(), (long long)r.number, r.nodes.size(),
                 world, world_ == 0 ? "" : c10::str(" (was ", world_, ")").c_str(), r.node_rank,
                 first, first + o_.nproc_per_node() - 1, r.cause.empty() ? "" : "; because ",
                 r.cause.c_str());
    if (!o_.log_dir().empty()) {
      std::ofstream out(o_.log_dir() + "/membership.jsonl", std::ios::app);
      const nlohmann::json record = {{"time", double(std::time(nullptr))},
                                     {"round", r.number},
                                     {"old_world", world_},
                                     {"new_world", world},
                                     {"nodes", r.nodes},
                                     {"cause", r.cause}};
      out << record.dump() << '\n';
    }
    world_ = world;
  }
  void round_ends(const Round& r, const std::string& cause) const {
    std::fprintf(stderr, "%s: [%s] membership change: round %lld (world size %d) ends: %s\n",
                 o_.name().c_str(), clock_text().c_str(), (long long)r.number, world_,
                 cause.c_str());
  }

 private:
  const LaunchOptions& o_;
  int world_ = 0;
};

// The workers of one round: the round's world, meeting in the agent's store under its prefix.
WatchResult run_round(const LaunchOptions& o, const Round& round, ElasticRendezvous& rdzv,
                      const StopSignals& stop, const std::vector<std::vector<int>>& cpu_shares,
                      RoundStatus& news, std::unique_ptr<WorkerSet>& workers) {
  LaunchOptions per_round = o;
  per_round.nnodes(int(round.nodes.size())).node_rank(round.node_rank);
  const auto [host, port] = parse_endpoint(o.rdzv_endpoint());
  per_round.master_addr(host);
  std::vector<std::string> environment = {
      c10::str(env::kUseAgentStore, "=True"),
      c10::str(env::kStorePrefix, "=", rdzv.worker_prefix(round))};
  if (round.newcomer) environment.push_back(c10::str(env::kNewcomer, "=1"));
  // Where rank 0 keeps the job's progress (each round under its number) and why this round
  // began: the next round's rank 0 says what the change lost (job_progress.h).
  environment.push_back(c10::str(env::kProgressKey, "=", rdzv.progress_key()));
  if (!round.cause.empty()) environment.push_back(c10::str(env::kRoundCause, "=", round.cause));
  workers = std::make_unique<WorkerSet>(per_round, port, int(round.number - 1), "", cpu_shares,
                                        environment);
  workers->start();
  auto next_look = Clock::now();
  // With --on-failure continue the workers themselves go on without a lost node, and take in
  // a new one: only the job's end concerns the agent.
  const bool continuing = o.on_failure() == "continue";
  return workers->watch(stop, [&] {
    if (Clock::now() < next_look) return false;
    next_look = Clock::now() + ms(o.monitor_interval());
    if (const std::string lost = rdzv.lost_store(); !lost.empty()) {
      news = {RoundStatus::kClosed, lost};
      return true;
    }
    news = rdzv.check(round);
    if (continuing && news.kind == RoundStatus::kNodeLost) {
      for (const std::string& node : rdzv.drop_lost(round)) {
        std::fprintf(stderr,
                     "%s: [%s] node %s stopped answering; its place is free for a newcomer\n",
                     o.name().c_str(), clock_text().c_str(), node.c_str());
      }
    }
    if (continuing) return news.kind == RoundStatus::kClosed;
    return news.kind != RoundStatus::kRunning;
  });
}

// A worker that lost a peer shows the effect; the cause is another node's. Its heartbeat stops
// (a node lost) or it begins a new round itself (its workers failed): wait for either, as long
// as a lost node takes to be noticed; a new round could not form sooner anyway, since it waits
// for every node of this one that has not been found lost. kRunning: nothing was found.
RoundStatus peer_failure_cause(const LaunchOptions& o, ElasticRendezvous& rdzv,
                               const Round& round) {
  const auto until = Clock::now() + ms(o.keep_alive() * (o.keep_alive_max_attempt() + 1));
  while (Clock::now() < until) {
    const RoundStatus news = rdzv.check(round);
    if (news.kind != RoundStatus::kRunning && news.kind != RoundStatus::kNodesWaiting) return news;
    std::this_thread::sleep_for(ms(o.monitor_interval()));  // bounded by `until`
  }
  return {};
}

// After a worker of this node failed (its workers stopped): the next round's cause, or the
// agent's exit code when the job ends. A failure of this node's own uses up a restart; so does a
// lost peer that no other node's failure or loss explains (a hang, a link between the workers
// broken while the store still answers), so that such a job cannot restart forever.
std::variant<std::string, int> after_failure(const LaunchOptions& o, ElasticRendezvous& rdzv,
                                             const Round& round, const Worker& w,
                                             const std::string& node, int& failures,
                                             const std::function<bool()>& stopped) {
  std::string cause = c10::str("node ", node, ": rank ", w.rank, " ", describe_exit(w.status));
  if (exited_with(w.status, kExitPeerFailure)) {
    const RoundStatus found = peer_failure_cause(o, rdzv, round);
    if (found.kind == RoundStatus::kClosed) {
      rdzv.depart(round, stopped);
      std::fprintf(stderr, "%s: the job ended: %s\n", o.name().c_str(), found.cause.c_str());
      return 1;
    }
    if (found.kind != RoundStatus::kRunning) return found.cause;  // not this node's doing
  }
  if (++failures > o.max_restarts()) {
    std::fprintf(stderr, "%s: no restarts left (--max-restarts %d): the job ends on every node\n",
                 o.name().c_str(), o.max_restarts());
    rdzv.close(c10::str(cause, "; no restarts left (", o.max_restarts(), ")"));
    rdzv.depart(round, stopped);
    return 1;
  }
  std::fprintf(stderr, "%s: restarting the workers in a new round (restart %d of %d)\n",
               o.name().c_str(), failures, o.max_restarts());
  return cause;
}

// The workers of `round` succeeded: the agent's exit code, or nullopt when a new round begins.
std::optional<int> after_success(const LaunchOptions& o, ElasticRendezvous& rdzv,
                                 const Round& round, const StopSignals& stop) {
  const auto stopped = [&] { return stop.received() != 0; };
  const RoundStatus news = rdzv.finish(round, stopped);
  if (news.kind == RoundStatus::kNewRound) return std::nullopt;
  if (news.kind == RoundStatus::kRunning) {  // stopped while the others finish
    rdzv.leave("");
    return 128 + stop.received();
  }
  rdzv.depart(round, stopped);
  if (news.cause == "the job finished") return 0;
  std::fprintf(stderr, "%s: the job failed: %s\n", o.name().c_str(), news.cause.c_str());
  return 1;
}

// --on-failure continue: one round for the whole job. A node arriving while it runs joins it,
// its workers as newcomers; a node lost is the workers' business (FaultTolerantGroup); the job
// ends when every node of the round is done or gone.
int launch_continuing(const LaunchOptions& o, const StopSignals& stop,
                      const std::vector<std::vector<int>>& cpu_shares) {
  ElasticRendezvous rdzv(settings_of(o), node_name());
  const auto stopped = [&] { return stop.received() != 0; };
  const Round round = rdzv.join(0, stopped, /*join_running=*/true);
  if (round.job_finished) {
    std::fprintf(stderr, "%s: the job finished without this node\n", o.name().c_str());
    return 0;
  }
  if (round.number == 0) return 128 + stop.received();
  MembershipLog log(o);
  log.round_begins(round);
  if (round.newcomer) {
    std::fprintf(stderr, "%s: joined the running job; its workers take the state from a peer\n",
                 o.name().c_str());
  }
  RoundStatus news;
  std::unique_ptr<WorkerSet> workers;
  const WatchResult result = run_round(o, round, rdzv, stop, cpu_shares, news, workers);
  if (result == WatchResult::kStopRequested) {
    std::fprintf(stderr, "%s: received %s, stopping this node's workers (the job goes on)\n",
                 o.name().c_str(), signal_name(stop.received()).c_str());
    workers->stop(o.grace_seconds());
    return 128 + stop.received();
  }
  workers->stop(o.grace_seconds());  // a failed worker was named as it ended (WorkerSet)
  const bool succeeded = result == WatchResult::kAllSucceeded;
  if (result != WatchResult::kInterrupted) news = rdzv.finish_surviving(round, succeeded, stopped);
  rdzv.depart(round, stopped);
  if (news.kind == RoundStatus::kClosed && news.cause != "the job finished") {
    std::fprintf(stderr, "%s: the job ended: %s\n", o.name().c_str(), news.cause.c_str());
    return 1;
  }
  return succeeded ? 0 : 1;
}

}  // namespace

std::pair<std::string, int> parse_endpoint(const std::string& endpoint) {
  const size_t colon = endpoint.rfind(':');
  std::string host = endpoint.substr(0, colon);
  int port = 29400;
  if (colon != std::string::npos) {
    const std::string text = endpoint.substr(colon + 1);
    char* end = nullptr;
    const long p = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || p < 1 || p > 65535) {
      throw InvalidArgument(c10::str("rdzv_endpoint '", endpoint, "': the port '", text,
                                     "' is not a number in [1, 65535]; use HOST:PORT"));
    }
    port = int(p);
  }
  if (host.empty()) throw InvalidArgument(c10::str("rdzv_endpoint '", endpoint, "' has no host"));
  return {host, port};
}

int launch_elastic(const LaunchOptions& o, const StopSignals& stop,
                   const std::vector<std::vector<int>>& cpu_shares) {
  if (o.on_failure() == "continue") return launch_continuing(o, stop, cpu_shares);
  const std::string node = node_name();
  ElasticRendezvous rdzv(settings_of(o), node);
  const auto stopped = [&] { return stop.received() != 0; };
  MembershipLog log(o);
  int failures = 0;
  int64_t after = 0;
  while (true) {
    const Round round = rdzv.join(after, stopped);
    if (round.job_finished) {
      std::fprintf(stderr, "%s: the job finished without this node\n", o.name().c_str());
      return 0;
    }
    if (round.number == 0) return 128 + stop.received();
    after = round.number;
    log.round_begins(round);
    const int64_t started_us = unix_microseconds();
    RoundStatus news;
    std::unique_ptr<WorkerSet> workers;
    const WatchResult result = run_round(o, round, rdzv, stop, cpu_shares, news, workers);
    if (result == WatchResult::kAllSucceeded) {
      if (const std::optional<int> code = after_success(o, rdzv, round, stop)) return *code;
      continue;
    }
    if (result == WatchResult::kStopRequested) {
      const int sig = stop.received();
      std::fprintf(stderr, "%s: received %s, stopping all workers\n", o.name().c_str(),
                   signal_name(sig).c_str());
      workers->stop(o.grace_seconds());
      rdzv.leave(c10::str("node ", node, " was stopped (", signal_name(sig), ")"));
      return 128 + sig;
    }
    if (result == WatchResult::kInterrupted) {
      log.round_ends(round, news.cause);
      workers->stop(o.grace_seconds());
      if (news.kind == RoundStatus::kClosed) {
        rdzv.depart(round, stopped);
        std::fprintf(stderr, "%s: the job ended: %s\n", o.name().c_str(), news.cause.c_str());
        return 1;
      }
      rdzv.next_round(round, news.cause);  // a no-op when another node began it
      continue;
    }
    report_frozen(o, *workers);
    workers->stop(o.grace_seconds());
    report_failure(o, workers->failed());
    print_hang_report(stderr, o.name(), o.debug_dir(), started_us);
    const auto outcome = after_failure(o, rdzv, round, workers->failed(), node, failures, stopped);
    if (const int* code = std::get_if<int>(&outcome)) return *code;
    const std::string& cause = std::get<std::string>(outcome);
    log.round_ends(round, cause);
    rdzv.next_round(round, cause);
  }
}

}  // namespace ddp
