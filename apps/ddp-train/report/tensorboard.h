// ddp-train --tensorboard DIR: scalars as TensorBoard event files (events.out.tfevents.*), the
// protobuf messages of tensorboard_event.proto in TFRecord framing (length, masked CRC-32C of
// the length, the message, masked CRC-32C of the message), readable by TensorBoard and by
// read_events below.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "created_file_guard.h"

namespace ddp::train {

/// Appends scalar events to a new event file in a directory.
class TensorBoardWriter {
 public:
  /// Creates `dir` if needed and a new file in it; throws IoError naming the path otherwise. The
  /// file is removed again if an exception destroys the writer before its first scalar.
  explicit TensorBoardWriter(const std::string& dir);
  /// One scalar (a point of the curve `tag`) at `step`; written through at once.
  void scalar(const std::string& tag, double value, int64_t step);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& bytes);
  std::string path_;
  std::optional<CreatedFileGuard> created_;
  std::ofstream out_;
};

/// One scalar event read back.
struct ScalarEvent {
  std::string tag;
  int64_t step = 0;
  float value = 0;
  double wall_time = 0;
};

/// Every scalar of an event file, in order; throws DataError naming the file and the record for
/// a truncated record or a checksum that does not match.
std::vector<ScalarEvent> read_events(const std::string& path);

/// CRC-32C (Castagnoli), as TFRecord uses, before masking.
uint32_t crc32c(const void* data, size_t size);

}  // namespace ddp::train
