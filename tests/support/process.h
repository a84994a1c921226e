// Test helpers: child processes with a bounded wait, free loopback ports, temporary
// directories, and ranks as threads over one in-memory store.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ddp/process_group.h"

namespace ddp::test {

/// How a child ended.
struct ProcessResult {
  int exit_code = -1;  // valid when !signaled
  int signal = 0;      // the signal that ended it, or 0
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

/// A started child process (stdout+stderr captured to a file).
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ~Child();  // kills the child if still running
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  int pid() const { return pid_; }
  /// Waits up to `timeout`; on time-out kills it (SIGKILL) and says so.
  ProcessResult wait(std::chrono::milliseconds timeout);

 private:
  int pid_ = -1;
  std::string log_path_;
  bool reaped_ = false;
};

/// Runs a command to completion (bounded) with extra environment variables.
ProcessResult run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env = {},
                  std::chrono::milliseconds timeout = std::chrono::seconds(120));

/// A TCP port on 127.0.0.1 that was free a moment ago.
int free_port();

/// A fresh directory under /tmp, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// Runs fn(rank, group) on `world` threads, one process group per thread over a shared
/// in-memory store, made with `options` but for their timeouts (`timeout`); returns each rank's
/// exception message ("" when it succeeded).
std::vector<std::string> run_ranks(
    int world, const std::function<void(int, std::shared_ptr<ProcessGroup>)>& fn,
    std::chrono::milliseconds timeout = std::chrono::seconds(30),
    const ProcessGroupOptions& options = {});

/// The distinct "final weights fingerprint" values ddp-train printed in `output`.
std::set<std::string> weight_fingerprints(const std::string& output);

/// Reads a whole file.
std::string read_file(const std::string& path);

/// The reference Python (DDP_PYTHON: .venv's, or python3 with python3-torch) running `script`
/// from tests/python with `args`.
ProcessResult run_python(const std::string& script, const std::vector<std::string>& args);

/// The same for a user tool, `script` from tools/ (make_imagefolder.py, step_trace.py).
ProcessResult run_tool(const std::string& script, const std::vector<std::string>& args,
                       std::chrono::milliseconds timeout = std::chrono::seconds(300));

/// The same for a benchmark's reference, `script` from bench/ (nanogpt_reference.py).
ProcessResult run_bench(const std::string& script, const std::vector<std::string>& args,
                        std::chrono::milliseconds timeout = std::chrono::seconds(300));

/// The source tree and the ddp-train binary.
inline std::string source_dir() { return DDP_SOURCE_DIR; }
inline std::string train_bin() { return DDP_TRAIN_BIN; }

}  // namespace ddp::test
