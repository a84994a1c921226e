// An output file that a program opens before its start-up, so that a bad path fails at once,
// and that a start-up failing after that must leave as it found it.
#pragma once

#include <string>

namespace ddp {

/// For an output file that a job opens before its start-up, so that a bad path fails at once:
/// a start-up that then fails must leave the file as it found it. Made before the file is
/// opened, the guard notes whether the file existed; destroyed by an exception before the owner
/// called wrote(), it removes a file that the opening created. (An owner that would truncate an
/// existing file waits until its first write to do so.)
class CreatedFileGuard {
 public:
  explicit CreatedFileGuard(std::string path);
  ~CreatedFileGuard();
  CreatedFileGuard(const CreatedFileGuard&) = delete;
  CreatedFileGuard& operator=(const CreatedFileGuard&) = delete;
  /// Moving hands the file over (its owners stay movable); the moved-from guard removes nothing.
  CreatedFileGuard(CreatedFileGuard&& other) noexcept;
  CreatedFileGuard& operator=(CreatedFileGuard&& other) noexcept;

  bool existed() const { return existed_; }
  /// The file now holds the job's output: keep it, whatever happens next.
  void wrote() { wrote_ = true; }

 private:
  std::string path_;
  bool existed_;
  bool wrote_ = false;
  int uncaught_at_start_;  // std::uncaught_exceptions() when made: more later means unwinding
};

}  // namespace ddp
