#include "ddp/fault_tolerance/fault_tolerance.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <thread>

#include <c10/util/StringUtil.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "ddp/error.h"
#include "fault_tolerance/member_watch.h"
#include "launcher_handshake.h"
#include "message_text.h"
#include "process_group/backends.h"
#include "process_group/rendezvous_wait.h"
#include "process_group/store_text.h"
#include "process_group/tcp_store.h"

// The store's keys, under "ft/":
//   hb/<id>            each member's heartbeat counter (member_watch.h)
//   members/<g>        generation g's Membership, as text, written once by whoever decides it
//   latest             the newest generation decided
//   begun/<g>          why generation g was begun (its first asker's cause)
//   q/<g>/<id>         member <id> of generation g - 1 is ready for generation g
//   vote/<g>/<n>/ok    members whose step n of generation g went well; .../verdict: the verdict
//   joiners            newcomers announced so far; waiting/<n>: the n-th one's id
//   pg/<g>/            generation g's process group
namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// How long a member polls the store between looks while it waits for the others.
constexpr auto kPoll = std::chrono::microseconds(200);

std::string to_text(const Membership& m) {
  return c10::str("generation ", m.generation, "\nadmitted ", m.admitted, "\nmembers ",
                  join_words(m.members), "\nlost ", join_words(m.lost), "\njoined ",
                  join_words(m.joined), "\ncause ", m.cause, "\n");
}

Membership from_text(const std::string& text) {
  Membership m;
  for_each_field(text, [&m](const std::string& key, const std::string& value) {
    if (key == "generation") m.generation = std::stoll(value);
    if (key == "admitted") m.admitted = std::stoll(value);
    if (key == "members") m.members = split_words(value);
    if (key == "lost") m.lost = split_words(value);
    if (key == "joined") m.joined = split_words(value);
    if (key == "cause") m.cause = value;
  });
  return m;
}

int index_of(const std::vector<std::string>& ids, const std::string& id) {
  const auto it = std::find(ids.begin(), ids.end(), id);
  return it == ids.end() ? -1 : int(it - ids.begin());
}

// The groups of past generations: a backend thread may still wait on a lost peer until the
// collective timeout, and the backend's destructor would wait for it. They live to the end of
// the process (one per membership change).
void retire(std::shared_ptr<ProcessGroup> group) {
  static auto* retired = new std::vector<std::shared_ptr<ProcessGroup>>();
  retired->push_back(std::move(group));
}

}  // namespace

bool Membership::is_newcomer(const std::string& id) const {
  return std::find(joined.begin(), joined.end(), id) != joined.end();
}

class FaultTolerantGroup::Impl {
 public:
  Impl(c10::intrusive_ptr<c10d::Store> job_store, const FaultToleranceOptions& o)
      : store(c10::make_intrusive<c10d::PrefixStore>("ft", std::move(job_store))), options(o) {
    if (o.heartbeat_interval().count() <= 0 || o.missed_heartbeats() < 1 || o.min_size() < 1) {
      throw InvalidArgument(c10::str("fault tolerance: heartbeat_interval (",
                                     o.heartbeat_interval().count(), " ms), missed_heartbeats (",
                                     o.missed_heartbeats(), ") and min_size (", o.min_size(),
                                     ") must be positive"));
    }
  }

  void start_watch(const std::string& id) {
    this->id = id;
    watch = std::make_unique<MemberWatch>(store, id, options.heartbeat_interval(),
                                          options.missed_heartbeats());
  }

  // Waits for `key` to have a value (polling, so a lost store or member ends the wait).
  std::string await(const std::string& key, std::chrono::milliseconds limit, const char* what) {
    const auto until = Clock::now() + limit;
    while (true) {
      const std::string text = text_at(*store, key);
      if (!text.empty()) return text;
      if (!watch->store_error().empty()) {
        throw DistributedError(c10::str(id, ": lost the job's store (", watch->store_error(),
                                        ") while waiting for ", what));
      }
      if (Clock::now() > until) {
        throw TimeoutError(c10::str(id, ": waited ", seconds(limit), " s for ", what, " in vain"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  // A newcomer's wait for a generation that takes it in, from `from` on; nullopt when the job
  // finished first.
  std::optional<Membership> await_admission(int64_t from) {
    const auto until = Clock::now() + options.join_timeout();
    for (int64_t g = from;;) {
      const std::string text = text_at(*store, c10::str("members/", g));
      if (text.empty() && store->check({"closed"})) return std::nullopt;
      if (text.empty()) {
        if (Clock::now() > until) {
          throw TimeoutError(c10::str(id, ": not admitted to the running job within ",
                                      seconds(options.join_timeout()),
                                      " s (its members take newcomers at a step boundary)"));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      Membership m = from_text(text);
      if (index_of(m.members, id) >= 0) return m;
      ++g;
    }
  }

  // Announces this process as a newcomer; returns the generation to look for it from.
  int64_t announce() {
    const int64_t n = store->add("joiners", 1);
    start_watch(c10::str("j", n));
    store->set(c10::str("waiting/", n), bytes(id));
    const std::string latest = text_at(*store, "latest");
    return latest.empty() ? 1 : std::stoll(latest);
  }

  // Generation `g` as the first member to see every member of `old` ready or lost decides it;
  // empty while that is not so.
  std::string proposal(const Membership& old, int64_t g, const std::string& cause,
                       Clock::time_point give_up, bool admit) {
    Membership next;
    next.generation = g;
    for (const auto& m : old.members) {
      if (store->check({c10::str("q/", g, "/", m)})) {
        next.members.push_back(m);
      } else if (watch->is_lost(m) || Clock::now() > give_up) {
        next.lost.push_back(m);
      } else {
        return "";  // still finishing its step
      }
    }
    const int64_t joiners = store->add("joiners", 0);
    next.admitted = old.admitted;
    while (admit && next.admitted < joiners) {
      const std::string newcomer = text_at(*store, c10::str("waiting/", next.admitted + 1));
      if (newcomer.empty()) break;  // announced, not yet named: the next generation takes it
      next.members.push_back(newcomer);
      next.joined.push_back(newcomer);
      ++next.admitted;
    }
    const std::string lost = watch->lost_text();
    next.cause = !next.lost.empty() && !lost.empty() ? c10::str("lost ", lost) : cause;
    return to_text(next);
  }

  // Deletes step `n`'s vote of generation `g` (its keys would pile up in the store, a pair a
  // step); a store that cannot delete (FileStore) keeps them.
  void forget_vote(int64_t g, int64_t n) {
    if (n < 0 || !can_delete) return;
    try {
      store->deleteKey(c10::str("vote/", g, "/", n, "/ok"));
      store->deleteKey(c10::str("vote/", g, "/", n, "/verdict"));
    } catch (const std::exception&) {
      can_delete = false;
    }
  }

  c10::intrusive_ptr<c10d::Store> store;  // the job's, under "ft/"
  FaultToleranceOptions options;
  std::string id;
  std::unique_ptr<MemberWatch> watch;
  int64_t steps_voted = 0;   // in this generation
  std::string last_verdict;  // of the last vote: why a reconfiguration follows
  bool can_delete = true;    // the store deletes keys
};

FaultTolerantGroup::FaultTolerantGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FaultTolerantGroup::~FaultTolerantGroup() {
  if (impl_->watch) impl_->watch->stop(false);
}

std::unique_ptr<FaultTolerantGroup> FaultTolerantGroup::start(
    c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
    const FaultToleranceOptions& options) {
  if (rank < 0 || rank >= world_size) {
    throw InvalidArgument(
        c10::str("fault tolerance: rank ", rank, " is not in [0, ", world_size, ")"));
  }
  auto impl = std::make_unique<Impl>(std::move(store), options);
  impl->start_watch(c10::str("r", rank));
  if (rank == 0) {
    Membership first;
    first.generation = 1;
    for (int r = 0; r < world_size; ++r) first.members.push_back(c10::str("r", r));
    first_value(*impl->store, "members/1", to_text(first));
    impl->store->set("latest", bytes("1"));
  }
  const Membership m = from_text(
      impl->await("members/1", options.group().rendezvous_timeout(), "rank 0 to open the job"));
  std::unique_ptr<FaultTolerantGroup> group(new FaultTolerantGroup(std::move(impl)));
  group->membership_ = m;
  group->connect();
  return group;
}

std::unique_ptr<FaultTolerantGroup> FaultTolerantGroup::join(c10::intrusive_ptr<c10d::Store> store,
                                                             const FaultToleranceOptions& options) {
  auto impl = std::make_unique<Impl>(std::move(store), options);
  const int64_t from = impl->announce();
  const std::optional<Membership> m = impl->await_admission(from);
  if (!m) {
    impl->watch->stop(true);
    return nullptr;
  }
  std::unique_ptr<FaultTolerantGroup> group(new FaultTolerantGroup(std::move(impl)));
  group->membership_ = *m;
  if (!text_at(*group->impl_->store, c10::str("begun/", m->generation + 1)).empty()) {
    group->reconfigure();  // admitted to a generation the others have already left
    return group;
  }
  try {
    group->connect();
  } catch (const Error& e) {  // a member lost while the group connected: the next generation
    std::fprintf(stderr, "%s: generation %lld did not connect (%s); forming the next\n",
                 group->impl_->id.c_str(), (long long)m->generation, first_line(e.what()).c_str());
    group->reconfigure();
  }
  return group;
}

// This generation's process group, over the store's "pg/<g>/".
void FaultTolerantGroup::connect() {
  Membership& m = membership_;
  m.rank = index_of(m.members, impl_->id);
  ProcessGroupOptions options = impl_->options.group();
  options.abortable(true);
  // Each dump of this generation's flight records says what changed (docs/debugging.md).
  options.description(
      m.generation == 1 ? "fault-tolerant generation 1"
                        : c10::str("fault-tolerant generation ", m.generation, " (world size ",
                                   m.size(), "; lost: ", join_words(m.lost),
                                   "; joined: ", join_words(m.joined), "; because ", m.cause, ")"));
  if (m.generation > 1) {
    // Everyone is there already: a member lost meanwhile should not cost the start-up's wait.
    options.rendezvous_timeout(std::min(options.rendezvous_timeout(),
                                        std::chrono::milliseconds(std::chrono::seconds(30))));
  }
  group_ = ProcessGroup::init_with_store(
      c10::make_intrusive<c10d::PrefixStore>(c10::str("pg/", m.generation), impl_->store), m.rank,
      m.size(), options);
  impl_->watch->watch(m.members, group_, m.generation);
  impl_->steps_voted = 0;
}

StepVerdict FaultTolerantGroup::vote(bool ok, bool admit) {
  Impl& s = *impl_;
  const std::string base = c10::str("vote/", membership_.generation, "/", s.steps_voted++, "/");
  const std::string key = base + "verdict";
  std::string verdict;
  if (ok && !group_->aborted()) {
    if (s.store->add(base + "ok", 1) == membership_.size()) {
      // (A newcomer counts once it has named itself: see proposal().)
      const bool waiting = admit && s.store->add("joiners", 0) > membership_.admitted &&
                           s.store->check({c10::str("waiting/", membership_.admitted + 1)});
      verdict = first_value(*s.store, key, waiting ? "grow" : "commit");
      s.forget_vote(membership_.generation, s.steps_voted - 3);  // everyone has read it
    }
  } else {
    verdict = first_value(*s.store, key, "discard");
  }
  // Bounded by the collective timeout: a member alive but never voting is hung.
  const auto until = Clock::now() + group_->timeout();
  while (verdict.empty()) {
    verdict = text_at(*s.store, key);
    if (!verdict.empty()) break;
    if (group_->aborted() || Clock::now() > until) verdict = first_value(*s.store, key, "discard");
    std::this_thread::sleep_for(kPoll);
  }
  s.last_verdict = verdict;
  if (verdict == "commit") return {true, false};
  if (verdict == "grow") return {true, true};
  return {false, true};
}

const Membership& FaultTolerantGroup::reconfigure(bool admit) {
  Impl& s = *impl_;
  while (true) {
    const int64_t g = membership_.generation + 1;
    const std::string lost = s.watch->lost_text();
    const std::string cause =
        first_value(*s.store, c10::str("begun/", g),
                    !lost.empty() ? c10::str("lost ", lost)
                    : s.last_verdict == "grow"
                        ? std::string("a newcomer asked to join")
                        : c10::str("a collective failed on ", s.id, " or another member"));
    if (group_) {
      if (!group_->aborted()) group_->abort(c10::str("generation ", g, " begun: ", cause));
      retire(std::move(group_));
    }
    s.store->set(c10::str("q/", g, "/", s.id), bytes("1"));
    const auto give_up = Clock::now() + s.options.group().timeout();
    std::string text;
    while ((text = text_at(*s.store, c10::str("members/", g))).empty()) {
      const std::string proposal = s.proposal(membership_, g, cause, give_up, admit);
      if (!proposal.empty()) {
        text = first_value(*s.store, c10::str("members/", g), proposal);
        s.store->set("latest", bytes(std::to_string(g)));
        break;
      }
      if (!s.watch->store_error().empty()) {
        throw DistributedError(
            c10::str(s.id, ": lost the job's store (", s.watch->store_error(), ")"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    Membership next = from_text(text);
    if (index_of(next.members, s.id) < 0) {
      throw DistributedError(
          c10::str(s.id, ": the others went on without this member in generation ", g, " (",
                   next.cause, "): it was silent for more than ",
                   seconds(s.options.heartbeat_interval() * s.options.missed_heartbeats()),
                   " s (frozen, or cut off), or did not come within the collective timeout; a "
                   "newcomer can take its place"));
    }
    if (next.size() < s.options.min_size()) {
      throw DistributedError(c10::str("only ", next.size(), " member(s) left (",
                                      join_words(next.members), "), fewer than the ",
                                      s.options.min_size(), " the job needs; ", next.cause));
    }
    membership_ = next;
    if (!text_at(*s.store, c10::str("begun/", next.generation + 1)).empty()) continue;  // left
    try {
      connect();
      return membership_;
    } catch (const Error& e) {  // a member lost while the group connected: once more
      std::fprintf(stderr, "%s: generation %lld did not connect (%s); forming the next\n",
                   s.id.c_str(), (long long)g, first_line(e.what()).c_str());
    }
  }
}

namespace {

// Whether `work` completed here (a lost peer's PeerFailure is the one failure expected).
bool completes(const std::function<void()>& work) {
  try {
    work();
    return true;
  } catch (const PeerFailure&) {
    return false;
  }
}

}  // namespace

void FaultTolerantGroup::settle(const std::function<void()>& adopt) {
  while (true) {
    const StepVerdict verdict = vote(completes(adopt), /*admit=*/false);
    if (verdict.commit) return;
    reconfigure(/*admit=*/false);
  }
}

void FaultTolerantGroup::run_to_completion(const std::function<void()>& phase,
                                           const std::function<void()>& adopt) {
  while (true) {
    const StepVerdict verdict = vote(completes(phase), /*admit=*/false);
    if (verdict.commit) return;
    reconfigure(/*admit=*/false);
    settle(adopt);
  }
}

bool FaultTolerantGroup::requested(const WorldInfo& world) {
  return handshake_of(world).fault_tolerant;
}

bool FaultTolerantGroup::is_newcomer(const WorldInfo& world) {
  return handshake_of(world).newcomer;
}

std::unique_ptr<FaultTolerantGroup> FaultTolerantGroup::from_environment(
    const FaultToleranceOptions& options, const WorldInfo& world) {
  const LauncherHandshake& launcher = handshake_of(world);
  c10::intrusive_ptr<c10d::Store> store;
  if (!launcher.store_file.empty()) {
    // No worker's exit may delete the file: the count of users is never reached.
    store =
        c10::make_intrusive<c10d::FileStore>(launcher.store_file, std::numeric_limits<int>::max());
  } else if (world.agent_store) {
    const auto& rendezvous = options.group().rendezvous_timeout();
    wait_for_store_server(world.master_addr, world.master_port, rendezvous, world.rank);
    // The group never waits on the store for long (it polls), so a call that takes longer
    // than this means the store's host is gone or cut off.
    const auto limit = std::max(std::chrono::milliseconds(std::chrono::seconds(10)),
                                options.heartbeat_interval() * options.missed_heartbeats() * 3);
    store = store_client(world.master_addr, world.master_port, limit);
  } else {
    throw InvalidArgument(
        "fault tolerance needs a store that outlives every worker: start the job with ddprun or "
        "ddp-train --nproc-per-node N and --on-failure continue (the launcher hosts the store)");
  }
  if (!launcher.store_prefix.empty()) {
    store = c10::make_intrusive<c10d::PrefixStore>(launcher.store_prefix, store);
  }
  // The collectives' sockets on the interface that reaches the master, as ProcessGroup::init's.
  FaultToleranceOptions o = options;
  o.group(backends::with_bind_address(options.group(), world.master_addr, world.master_port));
  if (launcher.newcomer) return join(store, o);
  return start(store, world.rank, world.world_size, o);
}

void FaultTolerantGroup::finish() {
  impl_->watch->stop(true);
  try {
    impl_->store->set("closed", bytes("1"));  // a newcomer still waiting goes home
  } catch (const std::exception&) {           // the store went first: nobody waits on it
  }
}

void broadcast_bytes(ProcessGroup& group, std::string& bytes, int root) {
  torch::Tensor size = torch::tensor({int64_t(bytes.size())}, torch::kInt64);
  group.broadcast(size, root).wait();
  torch::Tensor data = torch::empty({size.item<int64_t>()}, torch::kUInt8);
  if (group.rank() == root) std::memcpy(data.data_ptr(), bytes.data(), bytes.size());
  group.broadcast(data, root).wait();
  bytes.assign(reinterpret_cast<const char*>(data.data_ptr()), size_t(data.numel()));
}

}  // namespace ddp
