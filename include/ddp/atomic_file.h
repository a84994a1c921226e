// Files that are complete or absent: written to a temporary file in the same directory, flushed
// and fsync'ed, then renamed over the target. A crash leaves the previous file untouched.
#pragma once

#include <cstddef>
#include <string>

namespace ddp {

/// Writes `size` bytes to `path` atomically; throws IoError naming the path (disk full,
/// read-only directory, ...) and removes the temporary file.
void write_file_atomic(const std::string& path, const void* data, size_t size);

/// As above, for a string's bytes.
inline void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

/// Creates `dir` and its parents (like mkdir -p); throws IoError when it cannot.
void make_directories(const std::string& dir);

/// True when `path` names an existing file or directory.
bool path_exists(const std::string& path);

}  // namespace ddp
