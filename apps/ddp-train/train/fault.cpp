#include "train/fault.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <thread>

#include <c10/util/StringUtil.h>

#include "app_environment.h"
#include "ddp/error.h"
#include "flags.h"

namespace ddp::train {

Fault Fault::from_environment() {
  Fault f;
  const char* spec = std::getenv(env::kFault);
  if (spec == nullptr || *spec == '\0') return f;
  const std::string text(spec);
  const std::string name = env::kFault;
  const size_t at = text.find('@');
  const size_t colon = text.find(':', at);
  if (at == std::string::npos)
    throw InvalidArgument(c10::str(name, ": '", text, "' is not KIND@STEP[:RANK]"));
  f.kind_ = text.substr(0, at);
  if (f.kind_ != "nan" && f.kind_ != "throw" && f.kind_ != "hang" && f.kind_ != "exit" &&
      f.kind_ != "slow" && f.kind_ != "freeze") {
    throw InvalidArgument(c10::str(name, ": unknown kind '", f.kind_,
                                   "'; use nan, throw, hang, exit, slow or freeze"));
  }
  const bool timed = f.kind_ == "slow" || f.kind_ == "freeze";  // KIND@STEP:RANK:MS
  f.step_ = int(cli::parse_int64(
      name + " step",
      text.substr(at + 1, colon == std::string::npos ? std::string::npos : colon - at - 1), 1,
      1 << 30));
  const size_t second = colon == std::string::npos ? colon : text.find(':', colon + 1);
  if (timed && second == std::string::npos)
    throw InvalidArgument(c10::str(name, ": '", text, "' is not ", f.kind_, "@STEP:RANK:MS"));
  if (colon != std::string::npos) {
    f.rank_ = int(cli::parse_int64(
        name + " rank",
        text.substr(colon + 1, second == std::string::npos ? second : second - colon - 1), 0,
        1 << 20));
  }
  if (second != std::string::npos) {
    if (!timed) throw InvalidArgument(c10::str(name, ": '", text, "' is not KIND@STEP[:RANK]"));
    f.slow_ms_ = int(cli::parse_int64(name + " milliseconds", text.substr(second + 1), 1, 3600000));
  }
  return f;
}

void Fault::at_loss(int64_t global_step, int rank, torch::Tensor& loss) const {
  if (kind_ == "slow" && global_step >= step_ && rank == rank_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));  // the injected straggling
    return;
  }
  if (kind_.empty() || global_step != step_ || rank != rank_) return;
  if (kind_ == "nan") loss = loss * std::nan("");
  if (kind_ == "throw")
    throw Error(
        c10::str("rank ", rank, ": injected fault (", env::kFault, ") at step ", global_step));
  if (kind_ == "exit") std::_Exit(3);
  if (kind_ == "freeze") {
    std::fprintf(stderr, "rank %d: injected freeze (%s) at step %lld for %d ms\n", rank,
                 env::kFault, (long long)global_step, slow_ms_);
    std::fflush(stderr);
    // The whole process stops, heartbeat thread included, as under SIGSTOP; a child wakes it.
    const pid_t self = ::getpid();
    if (::fork() == 0) {
      const timespec pause{slow_ms_ / 1000, (slow_ms_ % 1000) * 1000000L};
      ::nanosleep(&pause, nullptr);
      ::kill(self, SIGCONT);
      ::_exit(0);
    }
    ::kill(self, SIGSTOP);
  }
  if (kind_ == "hang") {
    std::fprintf(stderr, "rank %d: injected hang (%s) at step %lld\n", rank, env::kFault,
                 (long long)global_step);
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // never returns
  }
}

}  // namespace ddp::train
