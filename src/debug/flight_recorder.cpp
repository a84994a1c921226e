#include "ddp/debug/flight_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include <c10/util/StringUtil.h>

#include "ddp/atomic_file.h"
#include "ddp/error.h"
#include "message_text.h"

namespace ddp {
namespace {

using nlohmann::json;

const char* state_name(CollectiveState s) {
  switch (s) {
    case CollectiveState::kIssued:
      return "issued";
    case CollectiveState::kCompleted:
      return "completed";
    case CollectiveState::kFailed:
      return "failed";
  }
  return "issued";
}

CollectiveState state_from(const std::string& name, const std::string& where) {
  if (name == "issued") return CollectiveState::kIssued;
  if (name == "completed") return CollectiveState::kCompleted;
  if (name == "failed") return CollectiveState::kFailed;
  throw DataError(c10::str(where, ": unknown collective state '", name, "'"));
}

json to_json_value(const CollectiveRecord& c) {
  return {{"seq", c.seq},
          {"op", c.op},
          {"dtype", c.dtype},
          {"shape", c.shape},
          {"step", c.step},
          {"bucket", c.bucket},
          {"issued_us", c.issued_us},
          {"completed_us", c.completed_us},
          {"state", state_name(c.state)},
          {"error", c.error}};
}

// The recorders that write themselves on SIGTERM. The signal handler only wakes a thread
// through a pipe (writing JSON is not async-signal-safe); that thread writes every record, then
// ends the process as SIGTERM's default action would.
struct SigtermDumps {
  std::mutex mutex;
  std::vector<const FlightRecorder*> recorders;
  int pipe_write = -1;

  static SigtermDumps& get() {
    static SigtermDumps* dumps = new SigtermDumps();  // never destroyed: the thread outlives main
    return *dumps;
  }

  static void on_sigterm(int) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(get().pipe_write, &byte, 1);
  }

  // Installs the handler and starts the thread, once per process.
  void install() {
    if (pipe_write >= 0) return;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;  // no dumps on SIGTERM; everything else works
    pipe_write = fds[1];
    std::thread([read_end = fds[0]] {
      char byte = 0;
      while (::read(read_end, &byte, 1) < 0) {
      }
      {
        std::lock_guard<std::mutex> lock(get().mutex);
        for (const FlightRecorder* r : get().recorders) r->dump("SIGTERM");
      }
      std::signal(SIGTERM, SIG_DFL);
      std::raise(SIGTERM);
    }).detach();
    struct sigaction sa {};
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGTERM, &sa, nullptr);
  }
};

}  // namespace

int64_t unix_microseconds() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t CollectiveRecord::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string CollectiveRecord::signature() const { return c10::str(op, " ", payload()); }

std::string CollectiveRecord::payload() const {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) dims += 'x';
    dims += std::to_string(shape[i]);
  }
  return c10::str(dtype, "[", dims, "]");
}

std::string CollectiveRecord::name() const {
  std::string where;
  if (step >= 0) where = c10::str("step ", step);
  if (bucket >= 0) where += c10::str(where.empty() ? "" : ", ", "bucket ", bucket);
  return c10::str(op, " #", seq, where.empty() ? "" : c10::str(" (", where, ")"));
}

std::string to_json(const RankRecord& r) {
  json collectives = json::array();
  for (const auto& c : r.collectives) collectives.push_back(to_json_value(c));
  const json j = {{"format", "ddp.cpp flight record 1"},
                  {"rank", r.identity.rank},
                  {"world_size", r.identity.world_size},
                  {"backend", r.identity.backend},
                  {"job", r.identity.job},
                  {"group", r.identity.description},
                  {"host", r.host},
                  {"pid", r.pid},
                  {"reason", r.reason},
                  {"written_us", r.written_us},
                  {"step", r.step},
                  {"issued", r.issued},
                  {"collectives", collectives}};
  return j.dump(1) + "\n";
}

RankRecord rank_record_from_json(const std::string& text, const std::string& where) {
  try {
    const json j = json::parse(text);
    if (j.value("format", "") != "ddp.cpp flight record 1")
      throw DataError(c10::str(where, " is not a ddp.cpp flight record"));
    RankRecord r;
    r.identity.rank = j.at("rank").get<int>();
    r.identity.world_size = j.at("world_size").get<int>();
    r.identity.backend = j.at("backend").get<std::string>();
    r.identity.job = j.at("job").get<std::string>();
    r.identity.description = j.value("group", std::string("default_pg"));
    r.host = j.at("host").get<std::string>();
    r.pid = j.at("pid").get<int64_t>();
    r.reason = j.at("reason").get<std::string>();
    r.written_us = j.at("written_us").get<int64_t>();
    r.step = j.at("step").get<int64_t>();
    r.issued = j.at("issued").get<int64_t>();
    for (const json& c : j.at("collectives")) {
      CollectiveRecord rec;
      rec.seq = c.at("seq").get<int64_t>();
      rec.op = c.at("op").get<std::string>();
      rec.dtype = c.at("dtype").get<std::string>();
      rec.shape = c.at("shape").get<std::vector<int64_t>>();
      rec.step = c.at("step").get<int64_t>();
      rec.bucket = c.at("bucket").get<int>();
      rec.issued_us = c.at("issued_us").get<int64_t>();
      rec.completed_us = c.at("completed_us").get<int64_t>();
      rec.state = state_from(c.at("state").get<std::string>(), where);
      rec.error = c.at("error").get<std::string>();
      r.collectives.push_back(std::move(rec));
    }
    return r;
  } catch (const json::exception& e) {
    throw DataError(c10::str(where, " is not a readable flight record: ", e.what()));
  }
}

std::string rank_record_path(const std::string& dir, int rank) {
  return c10::str(dir, "/flight-rank-", rank, ".json");
}

FlightRecorder::FlightRecorder(RecorderIdentity identity, size_t capacity)
    : identity_(std::move(identity)), capacity_(capacity) {
  ring_.reserve(std::min<size_t>(capacity_, 4096));
}

FlightRecorder::~FlightRecorder() {
  SigtermDumps& dumps = SigtermDumps::get();
  std::lock_guard<std::mutex> lock(dumps.mutex);
  auto& list = dumps.recorders;
  list.erase(std::remove(list.begin(), list.end(), this), list.end());
}

int64_t FlightRecorder::issue(std::string op, std::string dtype, std::vector<int64_t> shape,
                              int bucket) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t seq = ++issued_;
  if (capacity_ == 0) return seq;
  CollectiveRecord r;
  r.seq = seq;
  r.op = std::move(op);
  r.dtype = std::move(dtype);
  r.shape = std::move(shape);
  r.step = step_;
  r.bucket = bucket;
  r.issued_us = unix_microseconds();
  const size_t slot = size_t(seq - 1) % capacity_;
  if (slot < ring_.size()) {
    ring_[slot] = std::move(r);
  } else {
    ring_.push_back(std::move(r));
  }
  return seq;
}

CollectiveRecord* FlightRecorder::find(int64_t seq) {
  if (capacity_ == 0 || seq < 1) return nullptr;
  const size_t slot = size_t(seq - 1) % capacity_;
  if (slot >= ring_.size() || ring_[slot].seq != seq) return nullptr;
  return &ring_[slot];
}

void FlightRecorder::finish(int64_t seq, CollectiveState state, const std::string& error) {
  CollectiveRecord copy;
  std::function<void(const CollectiveRecord&)> listener;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CollectiveRecord* r = find(seq);
    if (r == nullptr || r->state != CollectiveState::kIssued) return;
    r->state = state;
    r->completed_us = unix_microseconds();
    r->error = error;
    if (!listener_) return;
    copy = *r;
    listener = listener_;
  }
  listener(copy);
}

void FlightRecorder::complete(int64_t seq) { finish(seq, CollectiveState::kCompleted, ""); }

void FlightRecorder::fail(int64_t seq, const std::string& error) {
  finish(seq, CollectiveState::kFailed, error);
}

void FlightRecorder::set_step(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
}

int64_t FlightRecorder::step() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return step_;
}

std::vector<CollectiveRecord> FlightRecorder::records() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CollectiveRecord> out;
  out.reserve(ring_.size());
  const int64_t first = std::max<int64_t>(1, issued_ - int64_t(ring_.size()) + 1);
  for (int64_t seq = first; seq <= issued_; ++seq)
    out.push_back(ring_[size_t(seq - 1) % capacity_]);
  return out;
}

int64_t FlightRecorder::issued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return issued_;
}

void FlightRecorder::on_finished(std::function<void(const CollectiveRecord&)> listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  listener_ = std::move(listener);
}

void FlightRecorder::dump_to(std::string dir, bool on_sigterm) {
  dump_dir_ = std::move(dir);
  if (dump_dir_.empty() || !on_sigterm) return;
  SigtermDumps& dumps = SigtermDumps::get();
  std::lock_guard<std::mutex> lock(dumps.mutex);
  dumps.install();
  dumps.recorders.push_back(this);
}

std::string FlightRecorder::dump(const std::string& reason) const {
  if (dump_dir_.empty()) return "";
  RankRecord record;
  record.identity = identity_;
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  record.host = host;
  record.pid = ::getpid();
  record.reason = reason;
  record.written_us = unix_microseconds();
  record.step = step();
  record.collectives = records();
  record.issued = issued();
  const std::string path = rank_record_path(dump_dir_, identity_.rank);
  try {
    make_directories(dump_dir_);
    write_file_atomic(path, to_json(record));
    const std::vector<char> dump = to_pytorch_dump(record);
    write_file_atomic(pytorch_dump_path(dump_dir_, identity_.rank), dump.data(), dump.size());
    return path;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: cannot write the flight record: %s\n", identity_.rank,
                 first_line(e.what()).c_str());
    return "";
  }
}

}  // namespace ddp
