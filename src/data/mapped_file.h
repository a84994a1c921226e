// A read-only memory mapping of a whole file (RAII). Several processes mapping the same file share
// its pages, which is how workers on one machine avoid holding a data set once each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp::data {

class MappedFile {
 public:
  /// Maps `path`; throws IoError naming the file when it is missing or unreadable.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ddp::data
