#include "ddp/elastic/launch.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <c10/util/StringUtil.h>

#include "ddp/atomic_file.h"
#include "ddp/debug/flight_recorder.h"
#include "ddp/debug/hang_analysis.h"
#include "ddp/environment.h"
#include "ddp/error.h"
#include "elastic/agent.h"
#include "elastic/launch_guards.h"
#include "elastic/launch_workers.h"
#include "unique_fd.h"

namespace ddp {
namespace {

int pick_free_port() {
  const UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    throw Error("cannot find a free port on 127.0.0.1");
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

// The elastic rendezvous's options (rdzv_backend "c10d").
void validate_elastic(const LaunchOptions& o) {
  if (o.rdzv_backend() == "static") {
    if (o.min_nodes() > 0 && o.min_nodes() != o.nnodes())
      throw InvalidArgument("a range of nodes (MIN:MAX) needs the rdzv_backend c10d");
    if (!o.rdzv_endpoint().empty())
      throw InvalidArgument("rdzv_endpoint needs the rdzv_backend c10d (static: master_addr)");
    return;
  }
  if (o.rdzv_backend() != "c10d") {
    throw InvalidArgument(
        c10::str("rdzv_backend '", o.rdzv_backend(), "' is not known; use static or c10d"));
  }
  if (o.rdzv_endpoint().empty())
    throw InvalidArgument("the c10d rendezvous needs rdzv_endpoint HOST:PORT");
  parse_endpoint(o.rdzv_endpoint());
  if (o.min_nodes() > o.nnodes()) {
    throw InvalidArgument(c10::str("nnodes ", o.min_nodes(), ":", o.nnodes(), ": MIN ",
                                   o.min_nodes(), " is more than MAX ", o.nnodes()));
  }
  if (o.rdzv_id().empty() || o.rdzv_id().find_first_of(" \t\n/") != std::string::npos)
    throw InvalidArgument(c10::str("rdzv_id '", o.rdzv_id(), "' must be a word (no spaces or /)"));
  if (!(o.join_timeout() > 0) || !(o.last_call() >= 0) || !(o.keep_alive() > 0) ||
      o.keep_alive_max_attempt() < 1 || !(o.monitor_interval() > 0)) {
    throw InvalidArgument(
        "join_timeout, keep_alive and monitor_interval must be > 0, last_call >= 0 and "
        "keep_alive_max_attempt >= 1");
  }
}

void validate(const LaunchOptions& o) {
  if (o.command().empty()) throw InvalidArgument("command is empty: no program to run");
  if (o.nproc_per_node() < 1) throw InvalidArgument("nproc_per_node must be at least 1");
  if (o.nnodes() < 1) throw InvalidArgument("nnodes must be at least 1");
  if (o.max_restarts() < 0) throw InvalidArgument("max_restarts must be >= 0");
  if (!(o.grace_seconds() >= 0)) throw InvalidArgument("grace_seconds must be >= 0");
  validate_elastic(o);
  if (o.on_failure() != "restart" && o.on_failure() != "continue") {
    throw InvalidArgument(
        c10::str("on_failure '", o.on_failure(), "' is neither restart nor continue"));
  }
  if (o.on_failure() == "continue" && o.rdzv_backend() != "c10d" && o.nnodes() > 1) {
    throw InvalidArgument(
        "on_failure continue across nodes needs rdzv_backend c10d (its agents host the store, "
        "which must outlive every worker)");
  }
  if (o.rdzv_backend() == "c10d") return;  // node_rank and the master come from the rendezvous
  if (o.node_rank() < 0 || o.node_rank() >= o.nnodes()) {
    throw InvalidArgument(
        c10::str("node_rank ", o.node_rank(), " is not in [0, nnodes) = [0, ", o.nnodes(), ")"));
  }
  if (o.nnodes() > 1 && o.master_port() == 0) {
    throw InvalidArgument("master_port is required with nnodes > 1 (every node must use the same)");
  }
  if (o.nnodes() > 1 && o.master_addr().rfind("127.", 0) == 0) {
    throw InvalidArgument(
        "master_addr must be rank 0's address reachable by every node with nnodes > 1");
  }
}

// Each local rank's CPUs under CpuBind::kCores (empty otherwise), said once on stderr.
std::vector<std::vector<int>> bind_cpus(const LaunchOptions& o) {
  if (o.cpu_bind() == CpuBind::kNone) return {};
  const std::vector<int> cpus = allowed_cpus();
  std::vector<std::vector<int>> shares;
  std::string text;
  for (int r = 0; r < o.nproc_per_node(); ++r) {
    shares.push_back(cpu_share(cpus, o.nproc_per_node(), r));
    text += c10::str(r == 0 ? "" : ", ", r, ": ", cpu_list_text(shares.back()));
  }
  std::fprintf(stderr, "%s: CPUs of each local rank (cpu_bind cores): %s\n", o.name().c_str(),
               text.c_str());
  return shares;
}

}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGHUP:
      return "SIGHUP";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGQUIT:
      return "SIGQUIT";
    default:
      return c10::str("signal ", sig);
  }
}

std::optional<bool> launcher_stdout_is_terminal() {
  const char* relayed = std::getenv(env::kStdoutTty);
  if (relayed == nullptr || *relayed == '\0') return std::nullopt;
  return std::strcmp(relayed, "0") != 0;
}

int launch(const LaunchOptions& given) {
  validate(given);
  LaunchOptions options = given;
  if (const char* dir = std::getenv(env::kDebugDir); options.debug_dir().empty() && dir != nullptr)
    options.debug_dir(dir);
  if (!options.log_dir().empty()) make_directories(options.log_dir());
  const std::vector<std::vector<int>> cpu_shares = bind_cpus(options);
  const StopSignals stop;
  if (options.rdzv_backend() == "c10d") return launch_elastic(options, stop, cpu_shares);
  const int port = options.master_port() > 0 ? options.master_port() : pick_free_port();
  // On one node the workers meet through a FileStore in a private directory instead of a TCP
  // port; a fresh file per restart, so a new group never sees the old one's keys.
  std::optional<TempDirectory> store_dir;
  if (options.nnodes() == 1) store_dir.emplace("ddp-launch-");
  for (int restart = 0;; ++restart) {
    const std::string store_file = store_dir ? c10::str(store_dir->path(), "/store-", restart) : "";
    WorkerSet workers(options, port, restart, store_file, cpu_shares);
    const int64_t started_us = unix_microseconds();
    workers.start();
    const WatchResult result = workers.watch(stop);
    if (result == WatchResult::kAllSucceeded) return 0;
    if (result == WatchResult::kStopRequested) {
      const int sig = stop.received();
      std::fprintf(stderr, "%s: received %s, stopping all workers\n", options.name().c_str(),
                   signal_name(sig).c_str());
      workers.stop(options.grace_seconds());
      print_hang_report(stderr, options.name(), options.debug_dir(), started_us);
      return 128 + sig;
    }
    report_frozen(options, workers);
    workers.stop(options.grace_seconds());
    // --on-failure continue: the last worker left failed (each was named as it ended).
    if (options.on_failure() == "continue") return 1;
    report_failure(options, workers.failed());
    print_hang_report(stderr, options.name(), options.debug_dir(), started_us);
    if (restart >= options.max_restarts()) return 1;
    std::fprintf(stderr, "%s: restarting the workers (restart %d of %d)\n", options.name().c_str(),
                 restart + 1, options.max_restarts());
  }
}

}  // namespace ddp
