#include "support/process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "ddp/error.h"
#include "ddp/process_group.h"

extern char** environ;

namespace ddp::test {

Child::Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  char tmpl[] = "/tmp/ddp-test-log-XXXXXX";
  const int log_fd = ::mkstemp(tmpl);
  if (log_fd < 0) throw std::runtime_error("mkstemp failed");
  log_path_ = tmpl;
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (env.count(name) == 0) env_strings.push_back(entry);
  }
  for (const auto& kv : env) env_strings.push_back(kv.first + "=" + kv.second);
  // The suite's programs train on the CPU unless a test says otherwise: on a GPU machine
  // --device auto would give each worker a GPU of its own, which a one-GPU machine lacks for two
  // (the GPU path is the Gpu.* tests' and scripts/gpu-check.sh's).
  if (env.count("CUDA_VISIBLE_DEVICES") == 0) env_strings.push_back("CUDA_VISIBLE_DEVICES=");
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::setpgid(0, 0);  // its own process group, so a kill reaches its children too
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    ::execve(args[0], args.data(), envp.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(log_fd);
}

Child::~Child() {
  if (!reaped_ && pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ::unlink(log_path_.c_str());
}

ProcessResult Child::wait(std::chrono::milliseconds timeout) {
  ProcessResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      result.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child, not a race
  }
  reaped_ = true;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  result.output = read_file(log_path_);
  return result;
}

ProcessResult run(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env,
                  std::chrono::milliseconds timeout) {
  Child child(argv, env);
  return child.wait(timeout);
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/ddp-test-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  const std::string cmd = "rm -rf '" + path_ + "'";
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", path_.c_str());
}

std::vector<std::string> run_ranks(
    int world, const std::function<void(int, std::shared_ptr<ProcessGroup>)>& fn,
    std::chrono::milliseconds timeout, const ProcessGroupOptions& base) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessGroupOptions options = base;
        options.timeout(timeout);
        options.rendezvous_timeout(timeout);
        auto group = ProcessGroup::init_with_store(store, r, world, options);
        fn(r, group);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        if (errors[size_t(r)].empty()) errors[size_t(r)] = "(empty exception message)";
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

std::set<std::string> weight_fingerprints(const std::string& output) {
  std::set<std::string> out;
  const std::regex re("final weights fingerprint ([0-9a-f]+)");
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it) {
    out.insert((*it)[1]);
  }
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

namespace {

// The reference Python running the file at `path` with `args`, reproducibly and on one thread.
ProcessResult run_python_file(const std::string& path, const std::vector<std::string>& args,
                              std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {DDP_PYTHON, path};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, {{"PYTHONHASHSEED", "0"}, {"OMP_NUM_THREADS", "1"}}, timeout);
}

}  // namespace

ProcessResult run_python(const std::string& script, const std::vector<std::string>& args) {
  return run_python_file(source_dir() + "/tests/python/" + script, args, std::chrono::seconds(300));
}

ProcessResult run_tool(const std::string& script, const std::vector<std::string>& args,
                       std::chrono::milliseconds timeout) {
  return run_python_file(source_dir() + "/tools/" + script, args, timeout);
}

ProcessResult run_bench(const std::string& script, const std::vector<std::string>& args,
                        std::chrono::milliseconds timeout) {
  return run_python_file(source_dir() + "/bench/" + script, args, timeout);
}

}  // namespace ddp::test
