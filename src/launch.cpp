#include "ddp/launch.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <memory>
#include <thread>

#include "ddp/atomic_file.h"
#include "ddp/error.h"
#include "ddp/hang_analysis.h"
#include "unique_fd.h"

extern char** environ;

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) { g_stop_signal = sig; }

// One output stream of one worker: complete lines go to the console and the log file.
struct Stream {
  UniqueFd fd;
  std::string partial;
  bool is_stderr = false;
};

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
  Stream out, err;
  std::deque<std::string> stderr_tail;
  std::unique_ptr<std::ofstream> log;
};

// Whether a waitpid() status is a normal exit with `code`.
bool exited_with(int status, int code) { return WIFEXITED(status) && WEXITSTATUS(status) == code; }

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

// A pipe's two ends, close-on-exec (the worker's copies are dup2'ed onto stdout and stderr).
struct Pipe {
  UniqueFd read, write;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw Error(concat("cannot create a pipe: ", std::strerror(errno)));
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

class Group {
 public:
  Group(const LaunchOptions& options, int port, int restart, std::string store_file,
        std::vector<std::vector<int>> cpu_shares)
      : o_(options),
        port_(port),
        restart_(restart),
        store_file_(std::move(store_file)),
        cpu_shares_(std::move(cpu_shares)) {}
  ~Group() { stop(0.0); }

  void start();
  // Watches until all exit 0 (returns -1), one fails (returns its index) or a signal arrives (-2).
  int watch();
  // SIGTERM everyone still running, SIGKILL after `grace` seconds; reaps them all.
  void stop(double grace);
  const Worker& worker(size_t i) const { return workers_[i]; }

 private:
  void spawn(Worker& w);
  void pump(Worker& w, Stream& s, bool final_flush);
  void emit(Worker& w, const std::string& line, bool is_stderr);
  void emit_live(Worker& w, const std::string& line);
  bool reap_one(Worker& w, bool block);
  int root_cause();

  const LaunchOptions& o_;
  int port_;
  int restart_;
  std::string store_file_;  // one node: the rendezvous FileStore; empty across nodes
  std::vector<std::vector<int>> cpu_shares_;  // per local rank, with --cpu-bind; else empty
  std::vector<Worker> workers_;
  bool live_shown_ = false;  // a worker's progress line is on the console, unfinished
};

void Group::start() {
  workers_.resize(size_t(o_.nproc_per_node()));
  for (int i = 0; i < o_.nproc_per_node(); ++i) {
    Worker& w = workers_[size_t(i)];
    w.local_rank = i;
    w.rank = o_.node_rank() * o_.nproc_per_node() + i;
    if (!o_.log_dir().empty()) {
      const std::string path = concat(o_.log_dir(), "/rank_", w.rank, ".log");
      w.log =
          std::make_unique<std::ofstream>(path, restart_ == 0 ? std::ios::trunc : std::ios::app);
      if (!*w.log) throw IoError(concat("log_dir: cannot write ", path));
    }
    spawn(w);
  }
}

void Group::spawn(Worker& w) {
  Pipe out = make_pipe(), err = make_pipe();
  const int world = o_.nnodes() * o_.nproc_per_node();
  std::vector<std::string> env;
  const std::vector<std::string> ours = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "GROUP_RANK",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "TORCHELASTIC_RESTART_COUNT",
                                         "TORCHELASTIC_USE_AGENT_STORE",
                                         "DDP_STORE_FILE",
                                         "DDP_DEBUG_DIR",
                                         "DDP_CPU_BIND"};
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const auto& n : ours) replaced = replaced || n == name;
    if (!replaced) env.push_back(entry);
  }
  env.push_back(concat("RANK=", w.rank));
  env.push_back(concat("WORLD_SIZE=", world));
  env.push_back(concat("LOCAL_RANK=", w.local_rank));
  env.push_back(concat("LOCAL_WORLD_SIZE=", o_.nproc_per_node()));
  env.push_back(concat("GROUP_RANK=", o_.node_rank()));
  env.push_back(concat("MASTER_ADDR=", o_.master_addr()));
  env.push_back(concat("MASTER_PORT=", port_));
  env.push_back(concat("TORCHELASTIC_RESTART_COUNT=", restart_));
  if (!store_file_.empty()) env.push_back("DDP_STORE_FILE=" + store_file_);
  if (!o_.debug_dir().empty()) env.push_back("DDP_DEBUG_DIR=" + o_.debug_dir());
  cpu_set_t cpus;  // filled here: the child only applies it
  CPU_ZERO(&cpus);
  if (!cpu_shares_.empty()) {
    for (int cpu : cpu_shares_[size_t(w.local_rank)]) CPU_SET(cpu, &cpus);
    env.push_back("DDP_CPU_BIND=cores");
  }
  // Workers write to pipes; this tells them the lines end up on a terminal (progress bars).
  if (::isatty(STDOUT_FILENO) == 1 && std::getenv("DDP_STDOUT_TTY") == nullptr) {
    env.push_back("DDP_STDOUT_TTY=1");
  }
  std::vector<char*> argv, envp;
  for (const auto& a : o_.command()) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(concat("fork failed: ", std::strerror(errno)));
  if (pid == 0) {
    // The worker dies with the launcher, even when the launcher is SIGKILLed: no orphans.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(128 + SIGKILL);
    ::setpgid(0, 0);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::dup2(out.write.get(), 1);
    ::dup2(err.write.get(), 2);
    if (!cpu_shares_.empty() && ::sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
      std::fprintf(stderr, "cannot bind to CPUs: %s\n", std::strerror(errno));
      ::_exit(127);
    }
    ::execvpe(argv[0], argv.data(), envp.data());
    std::fprintf(stderr, "cannot run %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  // Our ends never block: a worker that ignores SIGTERM (or a child of it that keeps the pipe
  // open) must not stall the launcher before it sends SIGKILL. The worker's ends close here.
  for (int fd : {out.read.get(), err.read.get()}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  w.pid = pid;
  w.running = true;
  w.out = Stream{std::move(out.read), "", false};
  w.err = Stream{std::move(err.read), "", true};
}

void Group::emit(Worker& w, const std::string& line, bool is_stderr) {
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
void Group::emit_live(Worker& w, const std::string& line) {
  if (o_.console_rank0_only() && w.rank != 0) return;
  std::fprintf(stdout, "[rank %d] %s\033[K\r", w.rank, line.c_str());
  live_shown_ = true;
  std::fflush(stdout);
}

void Group::pump(Worker& w, Stream& s, bool final_flush) {
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

bool Group::reap_one(Worker& w, bool block) {
  if (!w.running) return true;
  int status = 0;
  const pid_t r = ::waitpid(w.pid, &status, block ? 0 : WNOHANG);
  if (r == w.pid) {
    w.running = false;
    w.status = status;
    return true;
  }
  return false;
}

int Group::watch() {
  while (true) {
    if (g_stop_signal != 0) return -2;
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Stream*>> owners;
    for (auto& w : workers_) {
      for (Stream* s : {&w.out, &w.err}) {
        if (s->fd.valid()) {
          fds.push_back({s->fd.get(), POLLIN, 0});
          owners.emplace_back(&w, s);
        }
      }
    }
    // A bounded poll: exits are noticed through waitpid below, output through the pipes.
    const int ready = ::poll(fds.data(), nfds_t(fds.size()), 100);
    if (ready > 0) {
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
          pump(*owners[i].first, *owners[i].second, false);
      }
    }
    bool all_done = true;
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (w.running) reap_one(w, false);
      if (w.running) {
        all_done = false;
        continue;
      }
      if (!exited_with(w.status, 0)) {
        const int cause = root_cause();
        Worker& named = workers_[size_t(cause)];
        pump(named, named.out, true);
        pump(named, named.err, true);
        return cause;
      }
      if (w.out.fd.valid() || w.err.fd.valid()) all_done = false;  // output still draining
    }
    if (all_done) return -1;
  }
}

// The failed worker to name. One that exited with kExitPeerFailure only saw another rank fail;
// when that rank is on this node it exits at about the same moment (its sockets close as it
// ends, which is what the peer noticed), so give it a second and name it instead. Bounded: a
// hung peer never exits, and then the peer-failure rank is named with its message.
int Group::root_cause() {
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  while (true) {
    int symptom = -1;
    bool any_running = false;
    for (size_t i = 0; i < workers_.size(); ++i) {
      Worker& w = workers_[i];
      if (w.running) reap_one(w, false);
      if (w.running) {
        any_running = true;
        continue;
      }
      if (exited_with(w.status, 0)) continue;
      if (!exited_with(w.status, kExitPeerFailure)) return int(i);
      if (symptom < 0) symptom = int(i);
    }
    if (!any_running || Clock::now() >= deadline) return symptom;
    for (auto& w : workers_) {  // keep the pipes flowing so that no worker blocks on output
      pump(w, w.out, false);
      pump(w, w.err, false);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // bounded by the deadline
  }
}

void Group::stop(double grace) {
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
      if (!reap_one(w, false)) any = true;
    }
    if (any) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // bounded by grace
  }
  for (auto& w : workers_) {
    if (w.running) {
      ::kill(-w.pid, SIGKILL);
      ::kill(w.pid, SIGKILL);
      reap_one(w, true);
    }
    pump(w, w.out, true);
    pump(w, w.err, true);
  }
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
  if (exited_with(status, kExitPeerFailure))
    return concat("exited with code ", kExitPeerFailure,
                  " (it lost a peer: another rank exited or stopped answering)");
  return concat("exited with code ", WEXITSTATUS(status));
}

void validate(const LaunchOptions& o) {
  if (o.command().empty())
    throw InvalidArgument(
        concat(o.name(), ": no program to run; usage: ddprun [FLAGS] -- PROGRAM ARGS..."));
  if (o.nproc_per_node() < 1) throw InvalidArgument("nproc_per_node must be at least 1");
  if (o.nnodes() < 1) throw InvalidArgument("nnodes must be at least 1");
  if (o.node_rank() < 0 || o.node_rank() >= o.nnodes()) {
    throw InvalidArgument(
        concat("node_rank ", o.node_rank(), " is not in [0, nnodes) = [0, ", o.nnodes(), ")"));
  }
  if (o.nnodes() > 1 && o.master_port() == 0) {
    throw InvalidArgument("master_port is required with nnodes > 1 (every node must use the same)");
  }
  if (o.nnodes() > 1 && o.master_addr().rfind("127.", 0) == 0) {
    throw InvalidArgument(
        "master_addr must be rank 0's address reachable by every node with nnodes > 1");
  }
  if (o.max_restarts() < 0) throw InvalidArgument("max_restarts must be >= 0");
  if (!(o.grace_seconds() >= 0)) throw InvalidArgument("grace_seconds must be >= 0");
}

// Each local rank's CPUs under --cpu-bind cores (empty otherwise), said once on stderr.
std::vector<std::vector<int>> bind_cpus(const LaunchOptions& o) {
  if (o.cpu_bind() == CpuBind::kNone) return {};
  const std::vector<int> cpus = allowed_cpus();
  std::vector<std::vector<int>> shares;
  std::string text;
  for (int r = 0; r < o.nproc_per_node(); ++r) {
    shares.push_back(cpu_share(cpus, o.nproc_per_node(), r));
    text += concat(r == 0 ? "" : ", ", r, ": ", cpu_list_text(shares.back()));
  }
  std::fprintf(stderr, "%s: CPUs of each local rank (--cpu-bind cores): %s\n", o.name().c_str(),
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
      return concat("signal ", sig);
  }
}

int launch(const LaunchOptions& given) {
  validate(given);
  LaunchOptions options = given;
  if (const char* dir = std::getenv("DDP_DEBUG_DIR"); options.debug_dir().empty() && dir != nullptr)
    options.debug_dir(dir);
  if (!options.log_dir().empty()) make_directories(options.log_dir());
  const std::vector<std::vector<int>> cpu_shares = bind_cpus(options);
  const int port = options.master_port() > 0 ? options.master_port() : pick_free_port();
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);
  auto restore = [&] {
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  };
  // On one node the workers meet through a FileStore in a private directory instead of a TCP
  // port; a fresh file per restart, so a new group never sees the old one's keys.
  std::string store_dir;
  if (options.nnodes() == 1) {
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = concat(tmp && *tmp ? tmp : "/tmp", "/ddprun-XXXXXX");
    if (::mkdtemp(tmpl.data()) == nullptr) {
      throw IoError(concat("cannot create a directory like ", tmpl, ": ", std::strerror(errno)));
    }
    store_dir = tmpl;
  }
  int result = 0;
  for (int restart = 0;; ++restart) {
    const std::string store_file = store_dir.empty() ? "" : concat(store_dir, "/store-", restart);
    Group group(options, port, restart, store_file, cpu_shares);
    const int64_t started_us = unix_microseconds();
    group.start();
    const int failed = group.watch();
    if (failed == -1) {
      result = 0;
      break;
    }
    if (failed == -2) {
      std::fprintf(stderr, "%s: received %s, stopping all workers\n", options.name().c_str(),
                   signal_name(g_stop_signal).c_str());
      group.stop(options.grace_seconds());
      print_hang_report(stderr, options.name(), options.debug_dir(), started_us);
      result = 128 + g_stop_signal;
      break;
    }
    const Worker& w = group.worker(size_t(failed));
    const std::string how = describe_exit(w.status);
    group.stop(options.grace_seconds());
    std::fprintf(stderr, "%s: rank %d (local rank %d, pid %d) %s; stopped the other workers\n",
                 options.name().c_str(), w.rank, w.local_rank, int(w.pid), how.c_str());
    if (!w.stderr_tail.empty()) {
      std::fprintf(stderr, "%s: last stderr lines of rank %d:\n", options.name().c_str(), w.rank);
      for (const auto& line : w.stderr_tail) std::fprintf(stderr, "    %s\n", line.c_str());
    }
    print_hang_report(stderr, options.name(), options.debug_dir(), started_us);
    if (restart < options.max_restarts()) {
      std::fprintf(stderr, "%s: restarting the workers (restart %d of %d)\n",
                   options.name().c_str(), restart + 1, options.max_restarts());
      continue;
    }
    result = 1;
    break;
  }
  restore();
  if (!store_dir.empty()) {
    for (int r = 0; r <= options.max_restarts(); ++r)
      ::unlink(concat(store_dir, "/store-", r).c_str());
    ::rmdir(store_dir.c_str());
  }
  return result;
}

}  // namespace ddp
