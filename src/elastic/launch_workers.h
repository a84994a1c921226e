// The launcher's workers: one node's child processes of one command, with torchrun's
// environment, their output relayed line by line as "[rank N] ...", their exits watched. The
// WorkerSet owns them: when it goes, any still running is killed and reaped, so that no error
// path of the launcher leaves a process behind. Internal to libddp (launch.cpp).
#pragma once

#include <sys/types.h>

#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/elastic/launch.h"
#include "elastic/launch_guards.h"
#include "unique_fd.h"

namespace ddp {

/// One output stream of one worker: complete lines go to the console and the log file.
struct WorkerStream {
  UniqueFd fd;
  std::string partial;
  bool is_stderr = false;
};

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;         // waitpid()'s, once it has ended
  bool newcomer = false;  // --on-failure continue: a replacement joining the running job
  bool dropped = false;   // --on-failure continue: failed, not replaced; the others go on
  WorkerStream out, err;
  std::deque<std::string> stderr_tail;
  std::unique_ptr<std::ofstream> log;
};

/// How watching the workers ended.
enum class WatchResult {
  kAllSucceeded,   ///< every worker exited with 0, and all of its output was relayed (with
                   ///< --on-failure continue: every one not dropped)
  kWorkerFailed,   ///< a worker failed (with --on-failure continue: the last one left);
                   ///< failed() is the one to name as the cause
  kStopRequested,  ///< the launcher received SIGINT or SIGTERM
  kInterrupted,    ///< the caller's `interrupt` said so (an elastic round ended elsewhere)
};

/// One attempt's workers (a restart starts a new set).
class WorkerSet {
 public:
  /// `store_file`: where one node's workers meet (empty across nodes); `cpu_shares`: each local
  /// rank's CPUs under CpuBind::kCores, else empty; `extra_environment`: NAME=VALUE entries
  /// the workers get besides torchrun's.
  WorkerSet(const LaunchOptions& options, int port, int restart, std::string store_file,
            std::vector<std::vector<int>> cpu_shares,
            std::vector<std::string> extra_environment = {});
  ~WorkerSet() { stop(0.0); }
  WorkerSet(const WorkerSet&) = delete;
  WorkerSet& operator=(const WorkerSet&) = delete;

  /// Opens each worker's log and starts it. Throws IoError or Error, leaving the workers already
  /// started to the destructor.
  void start();
  /// Relays output until all exit, one fails, `stop` notes a signal or `interrupt` (asked about
  /// every 100 ms, when given) returns true. With --on-failure continue a failed worker is
  /// started again as a newcomer while --max-restarts allows, else dropped, and the others go on.
  WatchResult watch(const StopSignals& stop, const std::function<bool()>& interrupt = nullptr);
  /// SIGTERM to everyone still running, SIGKILL after `grace` seconds; reaps them all.
  /// The workers still running that are frozen (stopped by SIGSTOP or a debugger: state T in
  /// /proc), which wait like a hung rank but are neither dead nor hung; call before stop().
  std::vector<const Worker*> frozen() const;
  void stop(double grace);
  /// After WatchResult::kWorkerFailed: the worker that failed for its own reason, if any did.
  const Worker& failed() const { return workers_[failed_]; }

 private:
  std::vector<std::string> environment(const Worker& w) const;
  void spawn(Worker& w);
  void pump(Worker& w, WorkerStream& s, bool final_flush);
  void pump_all(bool final_flush);
  void emit(Worker& w, const std::string& line, bool is_stderr);
  void emit_live(Worker& w, const std::string& line);
  size_t root_cause();
  /// --on-failure continue: replaces or drops failed worker `w`; false when none is left.
  bool carry_on_without(Worker& w);

  const LaunchOptions& o_;
  int port_;
  int restart_;
  std::string store_file_;
  std::vector<std::vector<int>> cpu_shares_;
  std::vector<std::string> extra_environment_;
  std::vector<Worker> workers_;
  size_t failed_ = 0;
  int replacements_ = 0;     // workers started again under --on-failure continue
  bool live_shown_ = false;  // a worker's progress line is on the console, unfinished
};

/// How a worker ended, in words ("was killed by SIGKILL", "exited with code 1").
std::string describe_exit(int status);

/// The failed worker, how it ended and its last stderr lines, on stderr.
void report_failure(const LaunchOptions& o, const Worker& w);

/// The workers that are frozen (SIGSTOP), named as such: a stopped worker looks dead to its
/// peers. Call before stop().
void report_frozen(const LaunchOptions& o, const WorkerSet& workers);

/// Whether a waitpid() status is a normal exit with `code`.
bool exited_with(int status, int code);

}  // namespace ddp
