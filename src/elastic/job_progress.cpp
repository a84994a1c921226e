#include "ddp/elastic/job_progress.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include <c10/util/StringUtil.h>

#include "ddp/debug/flight_recorder.h"  // unix_microseconds
#include "ddp/error.h"
#include "launcher_handshake.h"
#include "message_text.h"
#include "process_group/store_text.h"
#include "process_group/tcp_store.h"

namespace ddp {
namespace {

// A store call that takes longer fails: the sender must not hang the process's exit on a link
// that is cut (tcp_store.h).
constexpr std::chrono::seconds kStoreLimit(5);
// The most often a step is sent: the agent's store also carries the heartbeats, and steps can be
// far faster than its round trip.
constexpr std::chrono::milliseconds kSendInterval(100);

// One round's record, under a key of its own: a late write from an old round (a node cut off
// whose link comes back) can never overwrite a newer round's.
std::string key_of(const std::string& base, int64_t round) { return c10::str(base, "/", round); }

// Throws on a record that is not one (another version's, say): the caller gives up on progress.
std::optional<ProgressRecord> parse(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(text);
  ProgressRecord r;
  r.round = j.at("round").get<int64_t>();
  r.world_size = j.at("world_size").get<int>();
  r.step = j.at("step").get<int64_t>();
  r.time = j.at("time").get<double>();
  return r;
}

std::string text_of(const ProgressRecord& r) {
  return nlohmann::json{
      {"round", r.round}, {"world_size", r.world_size}, {"step", r.step}, {"time", r.time}}
      .dump();
}

}  // namespace

// The thread that sends the newest step: publish() only leaves it there.
struct JobProgress::Sender {
  c10::intrusive_ptr<c10d::Store> store;
  std::string key;
  ProgressRecord record;  // round and world size fixed; step and time the newest
  std::mutex mutex;
  std::condition_variable changed;
  bool pending = false, stopping = false;
  std::thread thread;

  void run() {
    std::unique_lock<std::mutex> lock(mutex);
    while (true) {
      changed.wait(lock, [&] { return pending || stopping; });
      if (!pending) return;  // stopping, nothing left to send
      const std::string text = text_of(record);
      pending = false;
      lock.unlock();
      try {
        store->set(key, bytes(text));
      } catch (const std::exception& e) {
        std::fprintf(stderr,
                     "ddp: cannot keep the job's progress in the launcher's store (%s); a "
                     "restart will not say how many steps it lost\n",
                     first_line(e.what()).c_str());
        return;
      }
      lock.lock();
      changed.wait_for(lock, kSendInterval, [&] { return stopping; });
    }
  }
};

std::optional<std::string> JobProgress::round_cause(const WorldInfo& world) {
  const LauncherHandshake& launcher = handshake_of(world);
  if (launcher.progress_key.empty()) return std::nullopt;
  return launcher.round_cause;
}

std::unique_ptr<JobProgress> JobProgress::from_environment(const WorldInfo& world) {
  const LauncherHandshake& launcher = handshake_of(world);
  if (world.rank != 0 || launcher.progress_key.empty() || !world.agent_store) return nullptr;
  auto sender = std::make_unique<Sender>();
  std::optional<ProgressRecord> previous;
  try {
    sender->store = store_client(world.master_addr, world.master_port, kStoreLimit);
    // The round before, or the last before it that got to start (one that was over before its
    // rank 0 began published nothing, and lost nothing of its own).
    for (int64_t round = world.restart_count - 1; round >= 0 && !previous; --round) {
      previous = parse(text_at(*sender->store, key_of(launcher.progress_key, round)));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "ddp: cannot read the job's progress from the launcher's store at %s:%d (%s); "
                 "training goes on, but restarts will not say how many steps they lost\n",
                 world.master_addr.c_str(), world.master_port, first_line(e.what()).c_str());
    return nullptr;
  }
  sender->key = key_of(launcher.progress_key, world.restart_count);
  sender->record.round = world.restart_count;
  sender->record.world_size = world.world_size;
  sender->thread = std::thread([s = sender.get()] { s->run(); });
  return std::unique_ptr<JobProgress>(
      new JobProgress(std::move(sender), std::move(previous), launcher.round_cause));
}

JobProgress::JobProgress(std::unique_ptr<Sender> sender, std::optional<ProgressRecord> previous,
                         std::string cause)
    : sender_(std::move(sender)), previous_(std::move(previous)), cause_(std::move(cause)) {}

JobProgress::~JobProgress() {
  {
    const std::lock_guard<std::mutex> lock(sender_->mutex);
    sender_->stopping = true;
  }
  sender_->changed.notify_one();
  sender_->thread.join();  // sends the newest step first: the next round reads it
}

void JobProgress::publish(int64_t step) {
  {
    const std::lock_guard<std::mutex> lock(sender_->mutex);
    sender_->record.step = step;
    sender_->record.time = double(unix_microseconds()) * 1e-6;
    sender_->pending = true;
  }
  sender_->changed.notify_one();
}

}  // namespace ddp
