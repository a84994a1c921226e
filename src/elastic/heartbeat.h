// An elastic agent's sign of life in the rendezvous store, and how it judges the other agents':
// a counter each agent adds to every keep-alive interval, seen to move or not by the observer's
// own clock. Internal to libddp (rendezvous.cpp).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "elastic/rendezvous.h"
#include "message_text.h"
#include "process_group/tcp_store.h"

namespace ddp {

// A node's heartbeat counter is seen to move, or not, by this node's own clock (so the nodes'
// clocks need not agree). A node first seen now has a full timeout ahead of it.
class Liveness {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Liveness(std::chrono::milliseconds timeout) : timeout_(timeout) {}
  /// Whether the counter under `key` has not moved for the timeout.
  bool dead(c10d::Store& store, const std::string& key) {
    const auto now = Clock::now();
    Seen& seen = seen_[key];
    if (seen.looked != Clock::time_point{} && now - seen.looked < std::chrono::seconds(1))
      return now - seen.changed > timeout_;  // looked less than a second ago
    const int64_t beats = store.add(key, 0);
    if (seen.looked == Clock::time_point{} || beats != seen.beats) seen.changed = now;
    seen.beats = beats;
    seen.looked = now;
    return now - seen.changed > timeout_;
  }

 private:
  struct Seen {
    int64_t beats = -1;
    Clock::time_point changed, looked;
  };
  std::chrono::milliseconds timeout_;
  std::map<std::string, Seen> seen_;
};

// A node's sign of life: a counter in the store, added to every keep-alive interval by a thread
// with its own connection (so that a slow look at the state never delays it).
class Heartbeat {
 public:
  Heartbeat(const RendezvousSettings& s, std::string key) : s_(s), key_(std::move(key)) {
    thread_ = std::thread([this] { run(); });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  std::string lost() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lost_;
  }

 private:
  void run() {
    c10::intrusive_ptr<c10d::Store> store;
    int failures = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      lock.unlock();
      std::string error;
      try {
        if (!store) store = store_client(s_.host, s_.port, s_.keep_alive);
        store->add(key_, 1);
      } catch (const std::exception& e) {
        error = e.what();
        store.reset();
      }
      lock.lock();
      failures = error.empty() ? 0 : failures + 1;
      if (failures >= s_.keep_alive_max_attempt && lost_.empty()) {
        lost_ =
            c10::str("the rendezvous store at ", s_.host, ":", s_.port, " has not answered for ",
                     failures, " heartbeats (", first_line(error), ")");
      }
      wake_.wait_for(lock, s_.keep_alive, [this] { return stopping_; });
    }
  }
  const RendezvousSettings s_;
  const std::string key_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string lost_;
  std::thread thread_;
};

}  // namespace ddp
