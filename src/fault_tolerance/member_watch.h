// The fault-tolerant group's heartbeat: a thread that says every interval that this member is
// alive, watches the other members of the current generation say so, and aborts the generation's
// process group the moment one falls silent or the others begin a new generation, so that a
// collective waiting on a lost peer ends in seconds. Internal to libddp (fault_tolerance.cpp).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
}

namespace ddp {

class ProcessGroup;

/// A heartbeat counter this high means "finished", not "alive" (finish()).
constexpr int64_t kFinishedBeat = int64_t(1) << 40;

class MemberWatch {
 public:
  /// Starts beating as `id` under store key "hb/<id>".
  MemberWatch(c10::intrusive_ptr<c10d::Store> store, std::string id,
              std::chrono::milliseconds interval, int missed);
  ~MemberWatch();

  /// Watches `members` of generation `generation` (this one's excepted), aborting `group` when
  /// one is lost or "begun/<generation + 1>" appears. Each member starts with a full timeout.
  void watch(const std::vector<std::string>& members, std::shared_ptr<ProcessGroup> group,
             int64_t generation);
  /// Whether `id`, a watched member, has been silent too long (or has finished).
  bool is_lost(const std::string& id) const;
  /// The lost members so far, in words ("r2 silent for 3.0 s"); empty: none.
  std::string lost_text() const;
  /// A store error the heartbeat met (the job's store is gone); empty: none.
  std::string store_error() const;
  /// Stops beating; with `finished`, first marks this member finished.
  void stop(bool finished);

 private:
  void run();
  void beat_and_look();

  c10::intrusive_ptr<c10d::Store> store_;
  const std::string id_;
  const std::chrono::milliseconds interval_;
  const int missed_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  struct Seen {
    int64_t beat = -1;
    std::chrono::steady_clock::time_point since;
    bool lost = false;
    bool finished = false;
  };
  std::map<std::string, Seen> members_;  // the watched ones, under mutex_
  std::shared_ptr<ProcessGroup> group_;
  int64_t generation_ = 0;
  std::string store_error_;
  std::thread thread_;
};

}  // namespace ddp
