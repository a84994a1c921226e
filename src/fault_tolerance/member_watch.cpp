#include "fault_tolerance/member_watch.h"

#include <cstdio>

#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "ddp/error.h"
#include "ddp/process_group.h"
#include "message_text.h"
#include "process_group/store_text.h"

namespace ddp {

using Clock = std::chrono::steady_clock;

MemberWatch::MemberWatch(c10::intrusive_ptr<c10d::Store> store, std::string id,
                         std::chrono::milliseconds interval, int missed)
    : store_(std::move(store)), id_(std::move(id)), interval_(interval), missed_(missed) {
  store_->add("hb/" + id_, 1);  // alive before anyone looks
  thread_ = std::thread([this] { run(); });
}

MemberWatch::~MemberWatch() { stop(false); }

void MemberWatch::watch(const std::vector<std::string>& members,
                        std::shared_ptr<ProcessGroup> group, int64_t generation) {
  std::lock_guard<std::mutex> lock(mutex_);
  members_.clear();
  for (const auto& m : members) {
    if (m != id_) members_[m] = Seen{-1, Clock::now(), false};
  }
  group_ = std::move(group);
  generation_ = generation;
}

bool MemberWatch::is_lost(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = members_.find(id);
  return it != members_.end() && (it->second.lost || it->second.finished);
}

std::string MemberWatch::lost_text() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string text;
  for (const auto& [id, seen] : members_) {
    if (seen.lost) text += c10::str(text.empty() ? "" : ", ", id);
  }
  if (text.empty()) return text;
  return c10::str(text, " silent for ", seconds(interval_ * missed_), " s");
}

std::string MemberWatch::store_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return store_error_;
}

void MemberWatch::stop(bool finished) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (!finished) return;
  try {
    store_->add("hb/" + id_, kFinishedBeat);
  } catch (const std::exception&) {  // the store went first: nobody is left to mistake us
  }
}

void MemberWatch::run() {
  int failures = 0;  // in a row: the store is lost after as many as make a member lost
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    std::string error;
    try {
      beat_and_look();
    } catch (const std::exception& e) {
      error = first_line(e.what());
    }
    lock.lock();
    failures = error.empty() ? 0 : failures + 1;
    if (failures >= missed_) {
      store_error_ = error;
      if (group_ && !group_->aborted()) group_->abort("lost the job's store: " + store_error_);
      return;
    }
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

// One beat, and one look at the others (no lock held while the store answers).
void MemberWatch::beat_and_look() {
  store_->add("hb/" + id_, 1);
  std::vector<std::string> ids;
  int64_t generation = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : members_) ids.push_back(entry.first);
    generation = generation_;
  }
  std::vector<int64_t> beats;
  for (const auto& id : ids) beats.push_back(store_->add("hb/" + id, 0));
  const std::string begun =
      generation > 0 ? text_at(*store_, c10::str("begun/", generation + 1)) : "";
  std::lock_guard<std::mutex> lock(mutex_);
  if (generation != generation_) return;  // watch() changed the members meanwhile
  const auto now = Clock::now();
  std::string newly_lost;
  for (size_t i = 0; i < ids.size(); ++i) {
    Seen& seen = members_[ids[i]];
    if (beats[i] >= kFinishedBeat) {  // gone, though not lost: nothing to abort
      seen.finished = true;
      continue;
    }
    if (beats[i] != seen.beat) {
      seen.beat = beats[i];
      seen.since = now;
    } else if (!seen.lost && now - seen.since > interval_ * missed_) {
      seen.lost = true;
      newly_lost += c10::str(newly_lost.empty() ? "" : ", ", ids[i]);
    }
  }
  if (!group_ || group_->aborted()) return;
  if (!newly_lost.empty()) {
    group_->abort(c10::str("member ", newly_lost, " of generation ", generation, " silent for ",
                           seconds(interval_ * missed_), " s"));
  } else if (!begun.empty()) {
    group_->abort(c10::str("another member began generation ", generation + 1, ": ", begun));
  }
}

}  // namespace ddp
