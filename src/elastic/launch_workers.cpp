#include "elastic/launch_workers.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>
#include <utility>

#include <c10/util/StringUtil.h>

#include "ddp/environment.h"
#include "ddp/error.h"

extern char** environ;

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

// A pipe's two ends, close-on-exec (the worker's copies are dup2'ed onto stdout and stderr).
struct Pipe {
  UniqueFd read, write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(c10::str("cannot create a pipe: ", std::strerror(errno)));
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// The variables the launcher sets itself. A value of one in its own environment is not passed
// on: a launcher started inside another job must not hand that job's rank or store to its workers.
constexpr const char* kLauncherVariables[] = {
    env::kRank,        env::kWorldSize,  env::kLocalRank,    env::kLocalWorldSize, env::kGroupRank,
    env::kMasterAddr,  env::kMasterPort, env::kRestartCount, env::kUseAgentStore,  env::kStoreFile,
    env::kDebugDir,    env::kCpuBind,    env::kStorePrefix,  env::kOnFailure,      env::kNewcomer,
    env::kProgressKey, env::kRoundCause};

std::vector<std::string> inherited_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const char* ours : kLauncherVariables) replaced = replaced || name == ours;
    if (!replaced) env.push_back(entry);
  }
  return env;
}

// execve()'s form of `strings`: pointers into them, then a null.
std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

// The forked child until exec: everything it needs was prepared before the fork.
[[noreturn]] void become_worker(pid_t launcher, const Pipe& out, const Pipe& err,
                                const cpu_set_t* cpus, char* const* argv, char* const* envp) {
  // The worker dies with the launcher, even when the launcher is SIGKILLed: no orphans.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) ::_exit(128 + SIGKILL);
  ::setpgid(0, 0);
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  ::dup2(out.write.get(), 1);
  ::dup2(err.write.get(), 2);
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof *cpus, cpus) != 0) {
    std::fprintf(stderr, "cannot bind to CPUs: %s\n", std::strerror(errno));
    ::_exit(127);
  }
  ::execvpe(argv[0], argv, envp);
  std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
  ::_exit(127);
}

// Notes the worker's end if it has ended (or, with `block`, once it does); true when it has.
bool reap(Worker& w, bool block) {
  if (!w.running) return true;
  int status = 0;
  if (::waitpid(w.pid, &status, block ? 0 : WNOHANG) != w.pid) return false;
  w.running = false;
  w.status = status;
  return true;
}

}  // namespace

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
  if (exited_with(status, kExitPeerFailure))
    return c10::str("exited with code ", kExitPeerFailure,
                    " (it lost a peer: another rank exited or stopped answering)");
  return c10::str("exited with code ", WEXITSTATUS(status));
}

// The failed worker, how it ended and its last words, after the others were stopped.
void report_failure(const LaunchOptions& o, const Worker& w) {
  std::fprintf(stderr, "%s: rank %d (local rank %d, pid %d) %s; stopped the other workers\n",
               o.name().c_str(), w.rank, w.local_rank, int(w.pid), describe_exit(w.status).c_str());
  if (!w.stderr_tail.empty()) {
    std::fprintf(stderr, "%s: last stderr lines of rank %d:\n", o.name().c_str(), w.rank);
    for (const auto& line : w.stderr_tail) std::fprintf(stderr, "    %s\n", line.c_str());
  }
}

void report_frozen(const LaunchOptions& o, const WorkerSet& workers) {
  for (const Worker* w : workers.frozen()) {
    std::fprintf(stderr,
                 "%s: rank %d (local rank %d, pid %d) is frozen, not dead: it was stopped "
                 "(SIGSTOP, or a debugger) and the others waited for it\n",
                 o.name().c_str(), w->rank, w->local_rank, int(w->pid));
  }
}

bool exited_with(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

WorkerSet::WorkerSet(const LaunchOptions& options, int port, int restart, std::string store_file,
                     std::vector<std::vector<int>> cpu_shares,
                     std::vector<std::string> extra_environment)
    : o_(options),
      port_(port),
      restart_(restart),
      store_file_(std::move(store_file)),
      cpu_shares_(std::move(cpu_shares)),
      extra_environment_(std::move(extra_environment)) {}

void WorkerSet::start() {
  workers_.resize(size_t(o_.nproc_per_node()));
  for (int i = 0; i < o_.nproc_per_node(); ++i) {
    Worker& w = workers_[size_t(i)];
    w.local_rank = i;
    w.rank = o_.node_rank() * o_.nproc_per_node() + i;
    if (!o_.log_dir().empty()) {
      const std::string path = c10::str(o_.log_dir(), "/rank_", w.rank, ".log");
      w.log =
          std::make_unique<std::ofstream>(path, restart_ == 0 ? std::ios::trunc : std::ios::app);
      if (!*w.log) throw IoError(c10::str("log_dir: cannot write ", path));
    }
    spawn(w);
  }
}

std::vector<std::string> WorkerSet::environment(const Worker& w) const {
  std::vector<std::string> vars = inherited_environment();
  auto set = [&vars](const char* name, const auto& value) {
    vars.push_back(c10::str(name, "=", value));
  };
  set(env::kRank, w.rank);
  set(env::kWorldSize, o_.nnodes() * o_.nproc_per_node());
  set(env::kLocalRank, w.local_rank);
  set(env::kLocalWorldSize, o_.nproc_per_node());
  set(env::kGroupRank, o_.node_rank());
  set(env::kMasterAddr, o_.master_addr());
  set(env::kMasterPort, port_);
  set(env::kRestartCount, restart_);
  if (!store_file_.empty()) set(env::kStoreFile, store_file_);
  if (o_.on_failure() == "continue") set(env::kOnFailure, "continue");
  if (w.newcomer) set(env::kNewcomer, 1);
  vars.insert(vars.end(), extra_environment_.begin(), extra_environment_.end());
  if (!o_.debug_dir().empty()) set(env::kDebugDir, o_.debug_dir());
  if (!cpu_shares_.empty()) set(env::kCpuBind, "cores");  // launched_with_cpu_binding()
  // Workers write to pipes; this tells them the lines end up on a terminal (progress bars).
  if (::isatty(STDOUT_FILENO) == 1 && std::getenv(env::kStdoutTty) == nullptr) {
    set(env::kStdoutTty, 1);  // launcher_stdout_is_terminal()
  }
  return vars;
}

void WorkerSet::spawn(Worker& w) {
  Pipe out = make_pipe(), err = make_pipe();
  const std::vector<std::string> env = environment(w);
  const std::vector<char*> argv = c_strings(o_.command()), envp = c_strings(env);
  cpu_set_t cpus;  // filled here: the child only applies it
  CPU_ZERO(&cpus);
  if (!cpu_shares_.empty()) {
    for (int cpu : cpu_shares_[size_t(w.local_rank)]) CPU_SET(cpu, &cpus);
  }
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(c10::str("cannot start a worker: fork failed: ", std::strerror(errno)));
  if (pid == 0) {
    become_worker(launcher, out, err, cpu_shares_.empty() ? nullptr : &cpus, argv.data(),
                  envp.data());
  }
  w.pid = pid;
  w.running = true;
  // Our ends never block: a worker that ignores SIGTERM (or a child of it that keeps the pipe
  // open) must not stall the launcher before it sends SIGKILL. The worker's ends close here.
  for (int fd : {out.read.get(), err.read.get()}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  w.out = WorkerStream{std::move(out.read), "", false};
  w.err = WorkerStream{std::move(err.read), "", true};
}

void WorkerSet::emit(Worker& w, const std::string& line, bool is_stderr) {
  if (w.log) {
    *w.log << line << '\n';
    w.log->flush();
  }
  if (is_stderr) {
    w.stderr_tail.push_back(line);
    if (int(w.stderr_tail.size()) > o_.tail_lines()) w.stderr_tail.pop_front();
  }
  if (o_.console_rank0_only() && w.rank != 0) return;
  std::FILE* console = is_stderr ? stderr : stdout;
  // A progress line on show is cleared first (it ends with \r: the cursor is at its start).
  std::fprintf(console, "%s[rank %d] %s\n", live_shown_ ? "\033[K" : "", w.rank, line.c_str());
  live_shown_ = false;
  std::fflush(console);
}

// A line that ends in \r, not \n: a progress bar redrawn in place. On the console only (logs
// keep finished lines), drawn over the previous one.
void WorkerSet::emit_live(Worker& w, const std::string& line) {
  if (o_.console_rank0_only() && w.rank != 0) return;
  std::fprintf(stdout, "[rank %d] %s\033[K\r", w.rank, line.c_str());
  live_shown_ = true;
  std::fflush(stdout);
}

void WorkerSet::pump(Worker& w, WorkerStream& s, bool final_flush) {
  if (!s.fd.valid()) return;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(s.fd.get(), buf, sizeof buf);
    if (n > 0) {
      s.partial.append(buf, size_t(n));
      size_t end;
      while ((end = s.partial.find_first_of("\r\n")) != std::string::npos) {
        const std::string line = s.partial.substr(0, end);
        if (s.partial[end] == '\n') {
          emit(w, line, s.is_stderr);
        } else if (!s.is_stderr && !line.empty()) {
          emit_live(w, line);
        }
        s.partial.erase(0, end + 1);
      }
      if (!final_flush) return;  // come back after the others had their turn
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || final_flush) {
      if (!s.partial.empty()) emit(w, s.partial, s.is_stderr);
      s.partial.clear();
      s.fd.reset();
    }
    return;
  }
}

void WorkerSet::pump_all(bool final_flush) {
  for (auto& w : workers_) {
    pump(w, w.out, final_flush);
    pump(w, w.err, final_flush);
  }
}

WatchResult WorkerSet::watch(const StopSignals& stop, const std::function<bool()>& interrupt) {
  while (true) {
    if (stop.received() != 0) return WatchResult::kStopRequested;
    if (interrupt && interrupt()) return WatchResult::kInterrupted;
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, WorkerStream*>> owners;
    for (auto& w : workers_) {
      for (WorkerStream* s : {&w.out, &w.err}) {
        if (s->fd.valid()) {
          fds.push_back({s->fd.get(), POLLIN, 0});
          owners.emplace_back(&w, s);
        }
      }
    }
    // A bounded poll: exits are noticed through waitpid below, output through the pipes.
    if (::poll(fds.data(), nfds_t(fds.size()), 100) > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
          pump(*owners[i].first, *owners[i].second, false);
      }
    }
    bool all_done = true;
    for (Worker& w : workers_) {
      if (w.dropped) continue;
      if (!reap(w, false)) {
        all_done = false;
        continue;
      }
      if (!exited_with(w.status, 0) && o_.on_failure() == "continue") {
        failed_ = size_t(&w - workers_.data());
        if (carry_on_without(w)) {
          all_done = false;
          continue;
        }
        return WatchResult::kWorkerFailed;
      }
      if (!exited_with(w.status, 0)) {
        failed_ = root_cause();
        Worker& named = workers_[failed_];
        pump(named, named.out, true);
        pump(named, named.err, true);
        return WatchResult::kWorkerFailed;
      }
      if (w.out.fd.valid() || w.err.fd.valid()) all_done = false;  // output still draining
    }
    if (all_done) return WatchResult::kAllSucceeded;
  }
}

bool WorkerSet::carry_on_without(Worker& w) {
  pump(w, w.out, true);
  pump(w, w.err, true);
  const bool replace = replacements_ < o_.max_restarts();
  std::fprintf(stderr, "%s: rank %d (local rank %d, pid %d) %s; the job goes on without it%s\n",
               o_.name().c_str(), w.rank, w.local_rank, int(w.pid), describe_exit(w.status).c_str(),
               replace ? c10::str(", and a newcomer replaces it (restart ", replacements_ + 1,
                                  " of ", o_.max_restarts(), ")")
                             .c_str()
                       : "");
  for (const auto& line : w.stderr_tail) std::fprintf(stderr, "    %s\n", line.c_str());
  if (replace) {
    ++replacements_;
    w.newcomer = true;
    w.stderr_tail.clear();
    spawn(w);
    return true;
  }
  w.dropped = true;
  for (const Worker& other : workers_) {
    if (!other.dropped) return true;
  }
  return false;
}

// The failed worker to name. One that exited with kExitPeerFailure only saw another rank fail;
// when that rank is on this node it exits at about the same moment (its sockets close as it
// ends, which is what the peer noticed), so give it a second and name it instead. Bounded: a
// hung peer never exits, and then the peer-failure rank is named with its message.
size_t WorkerSet::root_cause() {
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (true) {
    size_t symptom = workers_.size();
    bool any_running = false;
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (!reap(w, false)) {
        any_running = true;
        continue;
      }
      if (exited_with(w.status, 0)) continue;
      if (!exited_with(w.status, kExitPeerFailure)) return i;
      if (symptom == workers_.size()) symptom = i;
    }
    if (!any_running || Clock::now() >= deadline) return symptom;
    pump_all(false);  // keep the pipes flowing so that no worker blocks on output
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // bounded by the deadline
  }
}

std::vector<const Worker*> WorkerSet::frozen() const {
  std::vector<const Worker*> out;
  for (const Worker& w : workers_) {
    if (!w.running) continue;
    // /proc/PID/stat: "PID (comm) S ...", the state after the last ')' (comm may hold one).
    std::ifstream in(c10::str("/proc/", int(w.pid), "/stat"));
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    const size_t close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() &&
        (stat[close + 2] == 'T' || stat[close + 2] == 't')) {
      out.push_back(&w);
    }
  }
  return out;
}

void WorkerSet::stop(double grace) {
  bool any = false;
  for (auto& w : workers_) {
    if (w.running) {
      ::kill(-w.pid, SIGTERM);
      ::kill(w.pid, SIGTERM);
      any = true;
    }
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(grace);
  while (any && Clock::now() < deadline) {
    any = false;
    for (auto& w : workers_) {
      pump(w, w.out, false);
      pump(w, w.err, false);
      if (!reap(w, false)) any = true;
    }
    if (any) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // bounded by grace
  }
  for (auto& w : workers_) {
    if (w.running) {
      ::kill(-w.pid, SIGKILL);
      ::kill(w.pid, SIGKILL);
      reap(w, true);
    }
    pump(w, w.out, true);
    pump(w, w.err, true);
  }
}

}  // namespace ddp
