#include "elastic/rendezvous.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <c10/util/Logging.h>
#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "elastic/heartbeat.h"
#include "elastic/state.h"
#include "message_text.h"
#include "process_group/rendezvous_wait.h"
#include "process_group/store_text.h"
#include "process_group/tcp_store.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;
using Store = c10::intrusive_ptr<c10d::Store>;

constexpr std::chrono::milliseconds kPoll{100};   // between two looks at the state
constexpr char kFinished[] = "the job finished";  // the cause of a job closed by its success

int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct ElasticRendezvous::Impl {
  RendezvousSettings s;
  std::string node;
  std::string key = "state";
  bool host = false;
  Store server;  // kept while this agent hosts the store
  Store store;   // rdzv/<id>/ of it
  std::unique_ptr<Heartbeat> heartbeat;
  Liveness liveness;
  int log_level = 0;  // c10's, put back when the rendezvous goes

  Impl(RendezvousSettings settings, std::string name)
      : s(std::move(settings)),
        node(std::move(name)),
        liveness(s.keep_alive * s.keep_alive_max_attempt) {}

  void connect();
  std::pair<std::string, RendezvousState> read();
  bool replace(const std::string& old_text, const RendezvousState& next);
  // Applies `change` to the state until its compare-and-set wins (`change` returns false to
  // leave the state as it is).
  void update(const std::function<bool(RendezvousState&)>& change);
  void drop_dead(RendezvousState& s);
  void try_complete(RendezvousState& s);
  void begin_next_round(RendezvousState& s, const std::string& cause);
  Round round_of(const RendezvousState& s) const;
  // Runs `f`, a store's error (c10d's, with its stack trace) becoming one line that says what
  // it means here.
  template <class F>
  auto guarded(F f) -> decltype(f()) {
    try {
      return f();
    } catch (const Error&) {
      throw;
    } catch (const c10::Error& e) {
      throw DistributedError(c10::str(
          "lost the rendezvous store at ", s.host, ":", s.port, " (",
          first_line(e.what_without_backtrace()), "); the agent started on ", s.host,
          " hosts it: when that node is gone, the job cannot go on without a new endpoint"));
    }
  }
  std::string waiting_text(const RendezvousState& s, Clock::time_point deadline) const;
  void register_agent(bool present);
  size_t other_live_agents();
};

// Every agent of any job that uses this store, one "ID NODE" line each: the store's host keeps
// it up until the others have left (another job may share the endpoint).
constexpr char kAgentsKey[] = "rdzv_agents";

void ElasticRendezvous::Impl::register_agent(bool present) {
  const std::string line = c10::str(s.run_id, " ", node, "\n");
  while (true) {
    const std::string old = text_at(*server, kAgentsKey);
    std::string next = old;
    const size_t at = next.find(line);
    if (present && at == std::string::npos) next += line;
    if (!present && at != std::string::npos) next.erase(at, line.size());
    if (next == old || string_of(server->compareSet(kAgentsKey, bytes(old), bytes(next))) == next)
      return;
  }
}

// The agents of other jobs still registered and beating.
size_t ElasticRendezvous::Impl::other_live_agents() {
  std::istringstream in(text_at(*server, kAgentsKey));
  size_t live = 0;
  for (std::string id, name; in >> id >> name;) {
    if (id != s.run_id && !liveness.dead(*server, c10::str("rdzv/", id, "/hb/", name))) ++live;
  }
  return live;
}

void ElasticRendezvous::Impl::connect() {
  const std::chrono::milliseconds op_timeout = s.keep_alive * s.keep_alive_max_attempt;
  // The endpoint's host hosts the store: whoever can listen on its address and port. (Asked
  // first: before LibTorch 2.4 the server binds every interface, and so would start anywhere.)
  if (is_local_address(s.host)) {
    try {
      server = tcp_store(s.host, s.port, true, 1, op_timeout);
      host = true;
    } catch (const std::exception&) {  // another agent on this machine hosts it
    }
  }
  if (!host) {
    const bool up = wait_with_progress(
        [&] { return store_accepts(s.host, s.port, std::chrono::milliseconds(500)); },
        s.join_timeout,
        [&](double waited, double left) {
          std::fprintf(stderr,
                       "%s: waiting for the rendezvous store at %s:%d (the agent on the "
                       "endpoint's host hosts it): %.0f s so far, %.0f s left\n",
                       s.name.c_str(), s.host.c_str(), s.port, waited, left);
        });
    if (!up) {
      throw TimeoutError(c10::str("the rendezvous endpoint ", s.host, ":", s.port,
                                  " did not answer within ", s.join_timeout.count() / 1000.0,
                                  " s; start the agent on that host, or check --rdzv-endpoint"));
    }
    server = store_client(s.host, s.port, op_timeout);
  }
  store = c10::make_intrusive<c10d::PrefixStore>(c10::str("rdzv/", s.run_id), server);
  heartbeat = std::make_unique<Heartbeat>(s, c10::str("rdzv/", s.run_id, "/hb/", node));
  register_agent(true);
}

std::pair<std::string, RendezvousState> ElasticRendezvous::Impl::read() {
  const std::string text = text_at(*store, key);
  return {text, state_of(text)};
}

bool ElasticRendezvous::Impl::replace(const std::string& old_text, const RendezvousState& next) {
  const std::string desired = text_of(next);
  return string_of(store->compareSet(key, bytes(old_text), bytes(desired))) == desired;
}

void ElasticRendezvous::Impl::update(const std::function<bool(RendezvousState&)>& change) {
  while (true) {
    auto [old_text, st] = read();
    RendezvousState next = st;
    if (!change(next) || next == st || replace(old_text, next)) return;
  }
}

void ElasticRendezvous::Impl::drop_dead(RendezvousState& st) {
  auto dead = [&](const std::string& n) { return n != node && liveness.dead(*store, "hb/" + n); };
  st.waiting.erase(std::remove_if(st.waiting.begin(), st.waiting.end(), dead), st.waiting.end());
  if (st.complete) return;  // a running round's dead are the running nodes' to notice
  for (auto* list : {&st.participants, &st.expected})
    list->erase(std::remove_if(list->begin(), list->end(), dead), list->end());
}

void ElasticRendezvous::Impl::try_complete(RendezvousState& st) {
  const int n = int(st.participants.size());
  bool all_back = !st.expected.empty();
  for (const std::string& e : st.expected) all_back = all_back && is_listed(st.participants, e);
  bool done = n >= s.max_nodes || (n >= s.min_nodes && all_back);
  if (!done && n >= s.min_nodes) {
    if (st.deadline == 0) st.deadline = wall_ms() + s.last_call.count();
    done = wall_ms() >= st.deadline;
  } else if (n < s.min_nodes) {
    st.deadline = 0;
  }
  if (!done) return;
  // Stable ranks: the previous round's nodes keep their order, newcomers follow in arrival order.
  std::stable_sort(st.participants.begin(), st.participants.end(),
                   [&](const std::string& a, const std::string& b) {
                     const auto pa = std::find(st.previous.begin(), st.previous.end(), a);
                     const auto pb = std::find(st.previous.begin(), st.previous.end(), b);
                     return pa < pb;
                   });
  st.complete = true;
  st.deadline = 0;
  st.expected.clear();
}

void ElasticRendezvous::Impl::begin_next_round(RendezvousState& st, const std::string& cause) {
  std::vector<std::string> alive;
  for (const std::string& n : st.participants) {
    if (n == node || !liveness.dead(*store, "hb/" + n)) alive.push_back(n);
  }
  st.previous = st.participants;
  st.expected = alive;
  st.participants.clear();
  // The waiting nodes are here already: they are the new round's first participants, as many
  // as fit beside the previous round's live nodes (which keep their places).
  while (!st.waiting.empty() && int(st.participants.size() + alive.size()) < s.max_nodes) {
    st.participants.push_back(st.waiting.front());
    st.waiting.erase(st.waiting.begin());
  }
  ++st.round;
  st.complete = false;
  st.deadline = 0;
  st.cause = cause;
}

Round ElasticRendezvous::Impl::round_of(const RendezvousState& st) const {
  Round r;
  r.number = st.round;
  r.nodes = st.participants;
  r.node_rank = int(std::find(r.nodes.begin(), r.nodes.end(), node) - r.nodes.begin());
  r.cause = st.cause;
  return r;
}

std::string ElasticRendezvous::Impl::waiting_text(const RendezvousState& st,
                                                  Clock::time_point deadline) const {
  return c10::str(
      st.participants.size(), " node(s) present of min ", s.min_nodes, " (max ", s.max_nodes,
      "): ", st.participants.empty() ? "none" : join_words(st.participants, ", "),
      st.complete ? "; a round is running, this node waits for the next" : "", "; ",
      std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count(), " s left");
}

ElasticRendezvous::ElasticRendezvous(RendezvousSettings settings, std::string node)
    : impl_(std::make_unique<Impl>(std::move(settings), std::move(node))) {
  // This agent says in one line what a store failure means (guarded()); c10d's own warnings
  // about it, stack traces included, would only repeat it.
  impl_->log_level = FLAGS_caffe2_log_level;
  FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, 2);
  impl_->guarded([&] { impl_->connect(); });
}

ElasticRendezvous::~ElasticRendezvous() {
  impl_->heartbeat.reset();  // before the store it may be hosting goes
  FLAGS_caffe2_log_level = impl_->log_level;
}

Round ElasticRendezvous::join(int64_t after, const std::function<bool()>& stopped,
                              bool join_running) {
  return impl_->guarded([&]() -> Round {
    Impl& m = *impl_;
    const auto deadline = Clock::now() + m.s.join_timeout;
    auto next_report = Clock::now() + kRendezvousProgressEvery;
    while (true) {
      if (stopped()) {
        leave("");
        return {};
      }
      auto [old_text, st] = m.read();
      if (!st.closed.empty()) m.store->set("left/" + m.node, bytes("1"));  // see depart()
      if (st.closed == kFinished) {
        Round over;
        over.job_finished = true;
        return over;
      }
      if (!st.closed.empty()) throw Error(c10::str("the job is over: ", st.closed));
      RendezvousState next = st;
      m.drop_dead(next);
      // A round formed after `after` with this node in it: this node's.
      const auto mine = [&] {
        return next.complete && next.round > after && is_listed(next.participants, m.node);
      };
      if (mine()) return m.round_of(next);
      const bool ending = m.store->add(c10::str("round_", next.round, "/finished"), 0) > 0;
      if (next.complete && join_running && !ending &&
          int(next.participants.size()) < m.s.max_nodes) {
        next.participants.push_back(m.node);  // into the running round, as a newcomer
        unlist(next.waiting, m.node);
        if (!m.replace(old_text, next)) continue;
        Round round = m.round_of(next);
        round.newcomer = true;
        return round;
      }
      if (next.complete) {
        if (!is_listed(next.waiting, m.node)) next.waiting.push_back(m.node);
      } else {
        if (!is_listed(next.participants, m.node)) next.participants.push_back(m.node);
        m.try_complete(next);
      }
      if (!(next == st) && !m.replace(old_text, next)) continue;  // someone else changed it
      if (mine()) return m.round_of(next);                        // this node completed it
      if (Clock::now() >= deadline) {
        const std::string present = m.waiting_text(next, deadline);
        leave("");
        throw TimeoutError(c10::str("the rendezvous of job '", m.s.run_id, "' at ", m.s.host, ":",
                                    m.s.port, " did not form within ",
                                    m.s.join_timeout.count() / 1000.0, " s: ", present,
                                    "; start the missing nodes, or lower --nnodes MIN"));
      }
      if (Clock::now() >= next_report) {
        std::fprintf(stderr, "%s: waiting for the nodes of job '%s': %s\n", m.s.name.c_str(),
                     m.s.run_id.c_str(), m.waiting_text(next, deadline).c_str());
        next_report += kRendezvousProgressEvery;
      }
      std::this_thread::sleep_for(kPoll);  // polling the store, bounded by the deadline
    }
  });
}

RoundStatus ElasticRendezvous::check(const Round& round) {
  return impl_->guarded([&]() -> RoundStatus {
    Impl& m = *impl_;
    const RendezvousState st = m.read().second;
    if (!st.closed.empty()) return {RoundStatus::kClosed, st.closed};
    if (st.round != round.number) return {RoundStatus::kNewRound, st.cause};
    const bool ending = m.store->add(c10::str("round_", round.number, "/finished"), 0) > 0;
    // A waiting node is taken in while the round has room (else it is a spare, as in torchrun).
    if (!st.waiting.empty() && !ending && int(round.nodes.size()) < m.s.max_nodes) {
      return {RoundStatus::kNodesWaiting,
              c10::str("node(s) ", join_words(st.waiting, ", "), " asked to join")};
    }
    for (const std::string& n : round.nodes) {
      if (n != m.node && m.liveness.dead(*m.store, "hb/" + n)) {
        return {RoundStatus::kNodeLost,
                c10::str("node ", n, " stopped answering (no heartbeat for ",
                         (m.s.keep_alive * m.s.keep_alive_max_attempt).count() / 1000.0, " s)")};
      }
    }
    return {};
  });
}

void ElasticRendezvous::next_round(const Round& round, const std::string& cause) {
  impl_->guarded([&] {
    impl_->update([&](RendezvousState& st) {
      if (!st.closed.empty() || st.round != round.number || !st.complete) return false;
      impl_->begin_next_round(st, cause);
      return true;
    });
  });
}

void ElasticRendezvous::leave(const std::string& cause) {
  impl_->guarded([&] {
    Impl& m = *impl_;
    m.update([&](RendezvousState& st) {
      if (!st.closed.empty()) return false;
      unlist(st.waiting, m.node);
      if (st.complete && is_listed(st.participants, m.node)) {
        m.begin_next_round(st, cause.empty() ? c10::str("node ", m.node, " left") : cause);
        unlist(st.expected, m.node);
      } else if (!st.complete) {
        unlist(st.participants, m.node);
        unlist(st.expected, m.node);
      }
      return true;
    });
  });
}

RoundStatus ElasticRendezvous::finish(const Round& round, const std::function<bool()>& stopped) {
  return impl_->guarded([&]() -> RoundStatus {
    Impl& m = *impl_;
    const int64_t finished = m.store->add(c10::str("round_", round.number, "/finished"), 1);
    if (finished >= int64_t(round.nodes.size())) close(kFinished);
    while (!stopped()) {
      const RoundStatus status = check(round);
      if (status.kind == RoundStatus::kClosed || status.kind == RoundStatus::kNewRound)
        return status;
      if (status.kind == RoundStatus::kNodeLost) {  // before it finished: the job is not done
        next_round(round, status.cause);
        return {RoundStatus::kNewRound, status.cause};
      }
      std::this_thread::sleep_for(kPoll);  // polling the store until every node has finished
    }
    return {};
  });
}

std::vector<std::string> ElasticRendezvous::drop_lost(const Round& round) {
  return impl_->guarded([&] {
    Impl& m = *impl_;
    std::vector<std::string> dropped;
    m.update([&](RendezvousState& st) {
      dropped.clear();
      if (!st.closed.empty() || st.round != round.number || !st.complete) return false;
      for (const std::string& n : st.participants) {
        if (n != m.node && m.liveness.dead(*m.store, "hb/" + n)) dropped.push_back(n);
      }
      for (const std::string& n : dropped) unlist(st.participants, n);
      return !dropped.empty();
    });
    return dropped;
  });
}

RoundStatus ElasticRendezvous::finish_surviving(const Round& round, bool succeeded,
                                                const std::function<bool()>& stopped) {
  return impl_->guarded([&]() -> RoundStatus {
    Impl& m = *impl_;
    const std::string done = c10::str("round_", round.number, "/done/");
    m.store->set(done + m.node, bytes(succeeded ? "ok" : "failed"));
    m.store->add(c10::str("round_", round.number, "/finished"), 1);  // no newcomer joins now
    while (!stopped()) {
      const RendezvousState st = m.read().second;
      if (!st.closed.empty()) return RoundStatus{RoundStatus::kClosed, st.closed};
      bool all_done = true, any_succeeded = false;
      for (const std::string& n : st.participants) {
        const std::string how = text_at(*m.store, done + n);
        any_succeeded = any_succeeded || how == "ok";
        all_done = all_done && (!how.empty() || m.liveness.dead(*m.store, "hb/" + n));
      }
      if (all_done) close(any_succeeded ? kFinished : "every node's workers failed");
      std::this_thread::sleep_for(kPoll);  // polling the store until every node is done
    }
    return RoundStatus{};
  });
}

void ElasticRendezvous::depart(const Round& round, const std::function<bool()>& stopped) {
  return impl_->guarded([&] {
    Impl& m = *impl_;
    const std::string gone = "gone/";  // an agent departs once, then exits: not per round
    m.register_agent(false);
    m.store->set(gone + m.node, bytes("1"));  // this node's last use of the store
    // A node still to read that the job is over: one of the round's, a newcomer that joined
    // it since (--on-failure continue) or a spare still waiting, that has neither said it is
    // gone nor read the end in join() (left/); a node whose heartbeat stopped needs nothing more.
    const auto someone_still_reading = [&] {
      const RendezvousState st = m.read().second;
      std::vector<std::string> nodes = round.nodes;
      for (const auto* more : {&st.participants, &st.waiting}) {
        for (const std::string& n : *more) {
          if (!is_listed(nodes, n)) nodes.push_back(n);
        }
      }
      for (const std::string& n : nodes) {
        if (!m.store->check({gone + n}) && !m.store->check({"left/" + n}) &&
            !m.liveness.dead(*m.store, "hb/" + n)) {
          return true;
        }
      }
      return false;
    };
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (m.host && Clock::now() < until && someone_still_reading()) {
      std::this_thread::sleep_for(kPoll);  // bounded by `until`
    }
    if (!m.host) return;
    // Agents of other jobs at this endpoint: until each has left or stopped beating.
    for (size_t others = m.other_live_agents(), said = 0; others > 0 && !stopped();
         others = m.other_live_agents()) {
      if (said++ == 0) {
        std::fprintf(stderr,
                     "%s: this node's job is over; it still hosts the rendezvous store for %zu "
                     "agent(s) of other jobs at %s:%d, until they leave\n",
                     m.s.name.c_str(), others, m.s.host.c_str(), m.s.port);
      }
      std::this_thread::sleep_for(kPoll);  // each other agent leaves, or its heartbeat stops
    }
  });
}

void ElasticRendezvous::close(const std::string& cause) {
  impl_->guarded([&] {
    impl_->update([&](RendezvousState& st) {
      if (!st.closed.empty()) return false;
      st.closed = cause;
      return true;
    });
  });
}

std::string ElasticRendezvous::lost_store() const { return impl_->heartbeat->lost(); }

std::string ElasticRendezvous::worker_prefix(const Round& round) const {
  return c10::str("rdzv/", impl_->s.run_id, "/round_", round.number, "/workers");
}

std::string ElasticRendezvous::progress_key() const {
  return c10::str("rdzv/", impl_->s.run_id, "/progress");
}

}  // namespace ddp
