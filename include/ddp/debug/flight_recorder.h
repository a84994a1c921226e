// The flight recorder: every rank keeps its last N collectives (what they moved, the training
// step and DDP bucket they belong to, when they were issued and completed, how they ended), so
// that after a hang the ranks' records say which rank stopped where. ProcessGroup feeds it. When
// a collective fails or times out, and when the process gets SIGTERM (a launcher stopping a hung
// job), the record is written as JSON to the debug directory; hang_analysis.h compares the files.
// PyTorch's own analyzer (torchfrtrace) reads the pickled dump written beside it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ddp {

enum class CollectiveState { kIssued, kCompleted, kFailed };

/// One collective as this rank saw it.
struct CollectiveRecord {
  /// 1-based count of the group's collectives: the same call has the same number on every rank.
  int64_t seq = 0;
  std::string op;     // "all-reduce", "broadcast(root 0)", "all-gather", "barrier", ...
  std::string dtype;  // "float32"
  std::vector<int64_t> shape;
  int64_t step = -1;  // the training step when it was issued (FlightRecorder::set_step); -1: none
  int bucket = -1;    // DDP's gradient bucket (CollectiveTag); -1: not a gradient bucket
  int64_t issued_us = 0;     // Unix time in microseconds
  int64_t completed_us = 0;  // when it completed or failed; 0 while in flight
  CollectiveState state = CollectiveState::kIssued;
  std::string error;  // kFailed: why

  int64_t numel() const;
  /// "float32[1000]"
  std::string payload() const;
  /// "all-reduce float32[1000]": what every rank must agree on.
  std::string signature() const;
  /// "all-reduce #812 (step 203, bucket 0)": how the messages name it.
  std::string name() const;
};

/// Who a rank's record belongs to, written with it.
struct RecorderIdentity {
  int rank = 0;
  int world_size = 1;
  std::string backend;
  std::string job;  // the same on every rank of one group, new for each group (hang_analysis.h)
  /// What the group is (ProcessGroupOptions::description): PyTorch's pg_config "desc".
  std::string description = "default_pg";
};

/// A rank's record as written to (and read back from) the debug directory.
struct RankRecord {
  RecorderIdentity identity;
  std::string host;
  int64_t pid = 0;
  std::string reason;      // why it was written: "SIGTERM", "all-reduce #812 failed: ..."
  int64_t written_us = 0;  // Unix time in microseconds
  int64_t step = -1;       // the step the rank was at
  int64_t issued = 0;      // collectives issued in all (more than kept, after a long run)
  std::vector<CollectiveRecord> collectives;  // oldest first
};

/// The JSON a rank's record is written as, and the record read back from it (throws DataError
/// naming `where` for text that is not one).
std::string to_json(const RankRecord& record);
RankRecord rank_record_from_json(const std::string& text, const std::string& where);
/// The file a rank's record goes to in `dir`.
std::string rank_record_path(const std::string& dir, int rank);

/// The same record in PyTorch's flight-recorder dump format (a pickle), which PyTorch's
/// analyzer reads: `torchfrtrace DIR` names the culprit of a hang from the ranks' dumps.
std::vector<char> to_pytorch_dump(const RankRecord& record);
/// Where the dump of `rank` goes in `dir` (PyTorch's naming: a prefix, then the rank).
std::string pytorch_dump_path(const std::string& dir, int rank);

/// Unix time now, in microseconds.
int64_t unix_microseconds();

/// The ring buffer of one process group's collectives on this rank. Thread-safe: collectives
/// complete on the backend's threads. Recording one costs a lock and a few small copies.
class FlightRecorder {
 public:
  /// Keeps the last `capacity` collectives (0: counts them, keeps none).
  FlightRecorder(RecorderIdentity identity, size_t capacity);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  /// Records a collective about to be issued, as part of DDP gradient bucket `bucket` (-1:
  /// none); returns its seq. The bucket comes with each call rather than from a "current bucket"
  /// because collectives of one bucket are issued at different times (PowerSGD's last one at
  /// the end of backward) and others may come in between.
  int64_t issue(std::string op, std::string dtype, std::vector<int64_t> shape, int bucket = -1);
  void complete(int64_t seq);
  void fail(int64_t seq, const std::string& error);

  /// The training step the collectives issued from now on belong to (the program sets it).
  void set_step(int64_t step);
  int64_t step() const;

  /// The kept records, oldest first.
  std::vector<CollectiveRecord> records() const;
  /// The number of collectives issued so far (the last seq).
  int64_t issued() const;
  /// Whether it keeps records at all (capacity above 0).
  bool keeps_records() const { return capacity_ > 0; }
  const RecorderIdentity& identity() const { return identity_; }

  /// Called with each collective as it completes or fails, on the thread that saw it (a program
  /// can draw a timeline of its all-reduces from it). Set before the collectives start.
  void on_finished(std::function<void(const CollectiveRecord&)> listener);

  /// Writes this rank's record to `dir` (when dump_to() gave one), atomically, saying `reason`.
  /// Returns the path written, or "" when there is no directory. Never throws: it runs while the
  /// job is failing, and a failure to write is reported on stderr.
  std::string dump(const std::string& reason) const;
  /// Where dump() writes; with `on_sigterm` the record is also written when the process gets
  /// SIGTERM, which then ends it as SIGTERM would have.
  void dump_to(std::string dir, bool on_sigterm);

 private:
  CollectiveRecord* find(int64_t seq);  // under mutex_; null when no longer kept
  void finish(int64_t seq, CollectiveState state, const std::string& error);

  const RecorderIdentity identity_;
  const size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<CollectiveRecord> ring_;  // ring_[(seq - 1) % capacity_]
  int64_t issued_ = 0;
  int64_t step_ = -1;
  std::function<void(const CollectiveRecord&)> listener_;
  std::string dump_dir_;
};

}  // namespace ddp
