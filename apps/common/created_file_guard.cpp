#include "created_file_guard.h"

#include <unistd.h>

#include <exception>
#include <utility>

#include "ddp/atomic_file.h"

namespace ddp {

CreatedFileGuard::CreatedFileGuard(std::string path)
    : path_(std::move(path)),
      existed_(path_exists(path_)),
      uncaught_at_start_(std::uncaught_exceptions()) {}

CreatedFileGuard::CreatedFileGuard(CreatedFileGuard&& other) noexcept
    : path_(std::move(other.path_)),
      existed_(other.existed_),
      wrote_(other.wrote_),
      uncaught_at_start_(other.uncaught_at_start_) {
  other.wrote_ = true;
}

CreatedFileGuard& CreatedFileGuard::operator=(CreatedFileGuard&& other) noexcept {
  path_ = std::move(other.path_);
  existed_ = other.existed_;
  wrote_ = other.wrote_;
  uncaught_at_start_ = other.uncaught_at_start_;
  other.wrote_ = true;
  return *this;
}

CreatedFileGuard::~CreatedFileGuard() {
  if (!existed_ && !wrote_ && std::uncaught_exceptions() > uncaught_at_start_) {
    ::unlink(path_.c_str());
  }
}

}  // namespace ddp
