#include "realtime_threads.h"

#include <pthread.h>

#include <cerrno>
#include <cstring>

#include "ddp/error.h"

namespace ddp {

RealtimeThreadScope::RealtimeThreadScope(int priority) {
  if (priority == 0) return;
  sched_param old{};
  if (const int rc = pthread_getschedparam(pthread_self(), &old_policy_, &old)) {
    note_ = concat("normal priority (SCHED_FIFO not tried: ", std::strerror(rc), ")");
    return;
  }
  old_priority_ = old.sched_priority;
  if (old_policy_ == SCHED_FIFO || old_policy_ == SCHED_RR) {
    realtime_ = true;
    note_ = concat(old_policy_ == SCHED_FIFO ? "SCHED_FIFO" : "SCHED_RR", " priority ",
                   old_priority_, ", the calling thread's");
    return;
  }
  sched_param wanted{};
  wanted.sched_priority = priority;
  if (const int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &wanted)) {
    note_ = concat("normal priority (SCHED_FIFO priority ", priority, " ",
                   rc == EPERM ? concat("not permitted: needs root (CAP_SYS_NICE) or `ulimit -r ",
                                        priority, "` or more")
                               : std::string(std::strerror(rc)),
                   ")");
    return;
  }
  realtime_ = changed_ = true;
  note_ = concat("SCHED_FIFO priority ", priority);
}

RealtimeThreadScope::~RealtimeThreadScope() {
  if (!changed_) return;
  sched_param old{};
  old.sched_priority = old_priority_;
  // Giving up a real-time priority is always permitted.
  pthread_setschedparam(pthread_self(), old_policy_, &old);
}

}  // namespace ddp
