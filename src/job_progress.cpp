#include "ddp/job_progress.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "ddp/error.h"
#include "store_text.h"
#include "tcp_store.h"

namespace ddp {
namespace {

// A store call that takes longer fails: the sender must not hang the process's exit on a link
// that is cut (tcp_store.h).
constexpr std::chrono::seconds kStoreLimit(5);

std::optional<ProgressRecord> parse(const std::string& text) {
  if (text.empty()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  ProgressRecord r;
  r.round = j.value("round", int64_t(0));
  r.world_size = j.value("world_size", 0);
  r.step = j.value("step", int64_t(0));
  r.time = j.value("time", 0.0);
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
    }
  }
};

std::unique_ptr<JobProgress> JobProgress::from_environment(const WorldInfo& world) {
  if (world.rank != 0 || world.progress_key.empty()) return nullptr;
  auto sender = std::make_unique<Sender>();
  sender->store = store_client(world.master_addr, world.master_port, kStoreLimit);
  sender->key = world.progress_key;
  sender->record.round = world.restart_count;
  sender->record.world_size = world.world_size;
  std::optional<ProgressRecord> previous = parse(text_at(*sender->store, sender->key));
  if (previous && previous->round >= world.restart_count) previous.reset();  // not an earlier one
  sender->thread = std::thread([s = sender.get()] { s->run(); });
  return std::unique_ptr<JobProgress>(
      new JobProgress(std::move(sender), std::move(previous), world.round_cause));
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
  sender_->thread.join();  // sends the last step first: the next round reads it
}

void JobProgress::publish(int64_t step) {
  {
    const std::lock_guard<std::mutex> lock(sender_->mutex);
    sender_->record.step = step;
    sender_->record.time =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    sender_->pending = true;
  }
  sender_->changed.notify_one();
}

}  // namespace ddp
