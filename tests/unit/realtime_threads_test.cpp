// RealtimeThreadScope: threads started in the scope inherit SCHED_FIFO, the caller gets its own
// policy back, and without permission nothing changes and the reason is given.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "src/realtime_threads.h"

namespace ddp {
namespace {

int policy_of_a_new_thread() {
  int policy = -1;
  std::thread([&] { policy = sched_getscheduler(0); }).join();
  return policy;
}

TEST(RealtimeThreadScope, ThreadsStartedInsideRunUnderFifoAndTheCallerGetsItsPolicyBack) {
  ASSERT_EQ(sched_getscheduler(0), SCHED_OTHER);
  {
    RealtimeThreadScope scope(1);
    if (!scope.realtime()) GTEST_SKIP() << "SCHED_FIFO refused here: " << scope.note();
    EXPECT_EQ(scope.note(), "SCHED_FIFO priority 1");
    EXPECT_EQ(policy_of_a_new_thread(), SCHED_FIFO);
    sched_param param{};
    ASSERT_EQ(sched_getparam(0, &param), 0);
    EXPECT_EQ(param.sched_priority, 1);
  }
  EXPECT_EQ(sched_getscheduler(0), SCHED_OTHER);
  EXPECT_EQ(policy_of_a_new_thread(), SCHED_OTHER);
}

TEST(RealtimeThreadScope, PriorityZeroChangesNothing) {
  RealtimeThreadScope scope(0);
  EXPECT_FALSE(scope.realtime());
  EXPECT_EQ(scope.note(), "normal priority");
  EXPECT_EQ(policy_of_a_new_thread(), SCHED_OTHER);
}

// An unprivileged process (RLIMIT_RTPRIO 0, no CAP_SYS_NICE): a child that gives up root first,
// so the test means the same as root and as a normal user.
TEST(RealtimeThreadScope, WithoutPermissionThreadsStayNormalAndTheReasonIsGiven) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (geteuid() == 0 &&
        (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0))
      _exit(10);
    const rlimit none{0, 0};
    if (setrlimit(RLIMIT_RTPRIO, &none) != 0) _exit(11);
    RealtimeThreadScope scope(1);
    if (scope.realtime()) _exit(12);
    if (scope.note() !=
        "normal priority (SCHED_FIFO priority 1 not permitted: needs root "
        "(CAP_SYS_NICE) or `ulimit -r 1` or more)")
      _exit(13);
    if (policy_of_a_new_thread() != SCHED_OTHER) _exit(14);
    if (sched_getscheduler(0) != SCHED_OTHER) _exit(15);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0)
      << "10: setresuid, 11: setrlimit, 12: applied anyway, "
         "13: wrong reason, 14: thread not normal, 15: caller changed";
}

// A caller that is real-time already keeps its policy, and so do the threads it starts.
TEST(RealtimeThreadScope, ARealtimeCallerIsLeftAsItIs) {
  std::string note;
  int inner = -1, after = -1, priority = -1;
  std::thread([&] {
    sched_param param{};
    param.sched_priority = 7;
    if (pthread_setschedparam(pthread_self(), SCHED_RR, &param) != 0) return;
    {
      RealtimeThreadScope scope(1);
      note = scope.note();
      inner = policy_of_a_new_thread();
    }
    after = sched_getscheduler(0);
    sched_getparam(0, &param);
    priority = param.sched_priority;
  }).join();
  if (inner == -1) GTEST_SKIP() << "SCHED_RR refused here";
  EXPECT_EQ(note, "SCHED_RR priority 7, the calling thread's");
  EXPECT_EQ(inner, SCHED_RR);
  EXPECT_EQ(after, SCHED_RR);
  EXPECT_EQ(priority, 7);
}

}  // namespace
}  // namespace ddp
