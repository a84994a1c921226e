#include "report/chrome_trace.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "ddp/atomic_file.h"
#include "ddp/error.h"

namespace ddp::train {
namespace {

int64_t steady_us(ChromeTrace::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

std::string track_name(int track) {
  if (track == 0) return "training";
  if (track == 1) return "other collectives";
  return c10::str("all-reduce bucket ", track - 2);
}

std::string metadata(const char* what, int pid, int tid, const std::string& value) {
  return c10::str("{\"name\":\"", what, "\",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                  ",\"args\":{\"name\":\"", value, "\"}}");
}

// Every rank's text, in rank order: an all-gather of the lengths, then of the padded bytes.
std::vector<std::string> gather_text(ProcessGroup& group, const std::string& mine) {
  torch::Tensor length = torch::tensor({int64_t(mine.size())});
  int64_t longest = 0;
  std::vector<int64_t> lengths;
  for (const torch::Tensor& l : group.allgather(length)) {
    lengths.push_back(l.item<int64_t>());
    longest = std::max(longest, lengths.back());
  }
  torch::Tensor bytes = torch::zeros({longest}, torch::kUInt8);
  std::memcpy(bytes.data_ptr<uint8_t>(), mine.data(), mine.size());
  std::vector<std::string> texts;
  const std::vector<torch::Tensor> all = group.allgather(bytes);
  for (size_t r = 0; r < all.size(); ++r) {
    const char* data = reinterpret_cast<const char*>(all[r].data_ptr<uint8_t>());
    texts.emplace_back(data, size_t(lengths[r]));
  }
  return texts;
}

}  // namespace

ChromeTrace::ChromeTrace(const std::string& path, int rank)
    : path_(path), rank_(rank), offset_us_(unix_microseconds() - steady_us(Clock::now())) {
  if (path_.empty() || rank != 0) return;
  const std::string dir = directory_of(path_);
  if (::access(dir.c_str(), W_OK) != 0) {
    throw IoError(c10::str("--trace: cannot write ", path_, ": ", dir, ": ", std::strerror(errno),
                           "; give a path in a writable directory"));
  }
}

void ChromeTrace::watch(FlightRecorder& recorder) {
  if (!enabled()) return;
  recorder.on_finished([this](const CollectiveRecord& c) {
    add({c10::str(c.op, " #", c.seq), c.bucket >= 0 ? 2 + c.bucket : 1, c.issued_us, c.completed_us,
         c.step});
  });
}

void ChromeTrace::span(const std::string& name, Clock::time_point begin, Clock::time_point end,
                       int64_t step) {
  if (!enabled()) return;
  add({name, 0, offset_us_ + steady_us(begin), offset_us_ + steady_us(end), step});
}

void ChromeTrace::add(Event event) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_track_ = std::max(max_track_, event.track);
  events_.push_back(std::move(event));
}

std::string ChromeTrace::events_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out = metadata("process_name", rank_, 0, c10::str("rank ", rank_));
  for (int track = 0; track <= max_track_; ++track)
    out += ",\n" + metadata("thread_name", rank_, track, track_name(track));
  for (const Event& e : events_) {
    out += c10::str(",\n{\"name\":\"", e.name, "\",\"cat\":\"", e.track == 0 ? "compute" : "comm",
                    "\",\"ph\":\"X\",\"pid\":", rank_, ",\"tid\":", e.track, ",\"ts\":", e.begin_us,
                    ",\"dur\":", std::max<int64_t>(0, e.end_us - e.begin_us), ",\"args\":{");
    if (e.step >= 0) out += c10::str("\"step\":", e.step);
    out += "}}";
  }
  return out;
}

void ChromeTrace::write(ProcessGroup* group) const {
  if (!enabled()) return;
  std::vector<std::string> ranks = {events_json()};
  if (group != nullptr && group->size() > 1) ranks = gather_text(*group, ranks.front());
  if (rank_ != 0) return;
  std::string text = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  for (size_t r = 0; r < ranks.size(); ++r) text += c10::str(r ? ",\n" : "", ranks[r]);
  text += "\n]}\n";
  try {
    write_file_atomic(path_, text);
  } catch (const IoError& e) {
    throw IoError(c10::str("--trace: ", e.what()));
  }
  std::printf("trace of %zu rank(s) written to %s (open it in ui.perfetto.dev)\n", ranks.size(),
              path_.c_str());
}

}  // namespace ddp::train
