// What the launcher changes outside itself while it runs, each held by an owner that gives it
// back however the launch ends (an exception included): the process's SIGINT/SIGTERM handlers,
// and the private directory where one node's workers meet. Internal to libddp (launch.cpp).
#pragma once

#include <signal.h>

#include <string>

namespace ddp {

/// While alive, SIGINT and SIGTERM are only noted (received()), so that the launcher can stop
/// its workers in order and report before it exits; the handlers found are put back on
/// destruction. One at a time per process: the note is process-wide, as a signal is.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  /// The last of SIGINT/SIGTERM received since construction, or 0.
  int received() const;

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

/// A new directory under $TMPDIR (or /tmp) that only this process uses, named PREFIX + six
/// random characters; removed, with whatever it holds, on destruction.
class TempDirectory {
 public:
  /// Throws IoError when it cannot be created.
  explicit TempDirectory(const std::string& prefix);
  ~TempDirectory();
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ddp
