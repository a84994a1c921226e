#pragma once
// Real-time scheduling for the threads a communication backend starts (internal to libddp).

#include <sched.h>

#include <string>

namespace ddp {

/// While it lives, the calling thread runs under SCHED_FIFO at `priority` (1-99), so every thread
/// it starts meanwhile inherits that policy (glibc's default PTHREAD_INHERIT_SCHED); its own
/// policy comes back when the scope ends. Priority 0 changes nothing, and neither does a caller
/// that is real-time already (its threads inherit its own policy, as they would anyway).
///
/// Why: Gloo's threads (the socket loop and the collectives' workers) sleep until data arrives.
/// Woken while every core runs a compute thread, a normal thread waits for one of them to use up
/// its time slice (up to a scheduler tick, 4 ms at HZ=250); a SCHED_FIFO thread runs at once,
/// moves its bytes in microseconds and sleeps again.
///
/// Needs CAP_SYS_NICE (root) or a RLIMIT_RTPRIO (`ulimit -r`) of at least `priority`; without,
/// nothing changes and note() says why.
class RealtimeThreadScope {
 public:
  explicit RealtimeThreadScope(int priority);
  ~RealtimeThreadScope();
  RealtimeThreadScope(const RealtimeThreadScope&) = delete;
  RealtimeThreadScope& operator=(const RealtimeThreadScope&) = delete;

  /// Whether threads started in this scope run under a real-time policy.
  bool realtime() const { return realtime_; }
  /// How they are scheduled, for logs: "normal priority", "SCHED_FIFO priority 1", or "normal
  /// priority (SCHED_FIFO priority 1 not permitted: ...)".
  const std::string& note() const { return note_; }

 private:
  bool realtime_ = false;
  bool changed_ = false;  // the calling thread's policy is to be restored
  std::string note_ = "normal priority";
  int old_policy_ = SCHED_OTHER;
  int old_priority_ = 0;
};

}  // namespace ddp
