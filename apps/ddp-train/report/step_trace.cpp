#include "report/step_trace.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::train {
namespace {

double seconds(StepTrace::Clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// CPU time of the calling thread (the training loop's): a step much longer than its CPU time
// waited (for a batch, for the other ranks, or for a core).
double thread_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  auto to_seconds = [](const timeval& t) { return double(t.tv_sec) + 1e-6 * double(t.tv_usec); };
  return to_seconds(usage.ru_utime) + to_seconds(usage.ru_stime);
}

}  // namespace

StepTrace::StepTrace(const std::string& prefix, int rank) {
  if (prefix.empty()) return;
  path_ = prefix + "." + std::to_string(rank) + ".csv";
  created_.emplace(path_);
  file_ = std::fopen(path_.c_str(), "a");
  if (!file_) {
    throw IoError(c10::str("--step-trace: cannot open ", path_, " for writing: ",
                           std::strerror(errno), "; give a prefix in a writable directory"));
  }
  last_cpu_seconds_ = thread_cpu_seconds();
}

StepTrace::~StepTrace() {
  if (file_) std::fclose(file_);
}

void StepTrace::write(const Step& s) {
  if (!file_) return;
  if (!started_) start();
  const double cpu = thread_cpu_seconds();
  const int written = std::fprintf(
      file_, "%d,%lld,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n", s.epoch, (long long)s.global_step,
      seconds(s.start), seconds(s.batch_ready), seconds(s.forward_done), seconds(s.backward_done),
      seconds(s.averaged), seconds(s.done), cpu - last_cpu_seconds_);
  last_cpu_seconds_ = cpu;
  if (written < 0 || std::fflush(file_) != 0) write_failed();
}

void StepTrace::start() {
  // Appending after an empty file is writing from its start.
  if (::ftruncate(::fileno(file_), 0) != 0 ||
      std::fprintf(file_,
                   "epoch,step,start,batch_ready,forward_done,backward_done,averaged,done,"
                   "cpu_seconds\n") < 0) {
    write_failed();
  }
  started_ = true;
  created_->wrote();
}

void StepTrace::write_failed() const {
  throw IoError(
      c10::str("--step-trace: cannot write ", path_, ": ", std::strerror(errno), " (disk full?)"));
}

}  // namespace ddp::train
