// Metrics as JSON lines: one flat object per line, flushed as written, so a crashed run still
// leaves every finished record readable. Written by rank 0 only (the caller decides).
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "created_file_guard.h"

namespace ddp {

/// One flat JSON object, built field by field in order.
class JsonRecord {
 public:
  JsonRecord& add(const std::string& key, double value);
  JsonRecord& add(const std::string& key, int64_t value);
  JsonRecord& add(const std::string& key, int value) { return add(key, int64_t(value)); }
  JsonRecord& add(const std::string& key, const std::string& value);
  JsonRecord& add(const std::string& key, const char* value) {
    return add(key, std::string(value));
  }
  JsonRecord& add(const std::string& key, bool value);
  /// The object as one line, without the newline.
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(const std::string& k);
  std::string body_;
};

/// Escapes a string for JSON (quotes included).
std::string json_quote(const std::string& text);

/// Appends records to a file, one per line.
class MetricsWriter {
 public:
  MetricsWriter() = default;
  /// Opens `path` for appending (no-op for an empty path); throws IoError when it cannot. A file
  /// this creates is removed again if an exception destroys the writer before its first record.
  explicit MetricsWriter(const std::string& path);
  bool enabled() const { return out_.is_open(); }
  void write(const JsonRecord& record);

 private:
  std::optional<CreatedFileGuard> created_;
  std::ofstream out_;
  std::string path_;
};

}  // namespace ddp
