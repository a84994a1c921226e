// Debugging a distributed job, ranks as threads: the flight recorder sees every collective with
// its step and DDP bucket; debug_collectives turns mismatched collectives into an error on every
// rank at once; monitored_barrier names the rank that did not come.
#include <gtest/gtest.h>

#include <chrono>

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "ddp/algorithms/powersgd.h"
#include "ddp/ddp.h"
#include "ddp/error.h"
#include "ddp/process_group.h"
#include "support/process.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(FlightRecorder, RecordsEveryCollectiveWithItsStepAndBucket) {
  const auto errors = test::run_ranks(2, [](int rank, std::shared_ptr<ProcessGroup> group) {
    torch::manual_seed(0);
    auto model = torch::nn::Linear(4, 2);
    DistributedDataParallel<torch::nn::LinearImpl> ddp(model, group);
    const int64_t before = group->recorder().issued();  // the start-up broadcasts
    group->recorder().set_step(7);
    ddp.forward(torch::ones({3, 4})).sum().backward();
    torch::Tensor t = torch::ones({5}, torch::kInt64);
    group->allreduce(t).wait();
    const auto records = group->recorder().records();
    ASSERT_EQ(group->recorder().issued(), before + 2);
    const CollectiveRecord& bucket = records[records.size() - 2];
    EXPECT_EQ(bucket.name(), c10::str("all-reduce #", before + 1, " (step 7, bucket 0)"));
    EXPECT_EQ(bucket.signature(), "all-reduce float32[10]");  // 8 weights and 2 biases
    const CollectiveRecord& last = records.back();
    EXPECT_EQ(last.name(), c10::str("all-reduce #", before + 2, " (step 7)"));
    EXPECT_EQ(last.dtype, "int64");
    for (const auto& r : records) EXPECT_EQ(r.state, CollectiveState::kCompleted) << r.name();
    EXPECT_EQ(rank, group->recorder().identity().rank);
  });
  EXPECT_EQ(errors, std::vector<std::string>(2, ""));
}

TEST(FlightRecorder, EveryCollectiveOfACommHookIsRecordedWithItsBucket) {
  const auto errors = test::run_ranks(2, [](int, std::shared_ptr<ProcessGroup> group) {
    torch::manual_seed(0);
    auto model = torch::nn::Linear(32, 16);  // a weight worth compressing, a bias that is not
    DistributedDataParallel<torch::nn::LinearImpl> ddp(model, group);
    ddp.register_comm_hook(std::make_unique<PowerSGDHook>(PowerSGDOptions().start_iter(0)));
    const int64_t before = group->recorder().issued();
    ddp.forward(torch::ones({3, 32})).sum().backward();
    // P and the bias as the bucket fills; Q, which needs the summed P, at the end of backward.
    ASSERT_EQ(group->recorder().issued(), before + 3);
    const auto records = group->recorder().records();
    for (int64_t k = 0; k < 3; ++k) {
      const CollectiveRecord& r = records[records.size() - 3 + size_t(k)];
      EXPECT_EQ(r.name(), c10::str("all-reduce #", before + 1 + k, " (bucket 0)"));
    }
  });
  EXPECT_EQ(errors, std::vector<std::string>(2, ""));
}

TEST(DebugCollectives, AMismatchFailsAtOnceOnEveryRankNamingBothCalls) {
  const auto start = Clock::now();
  const auto errors = test::run_ranks(
      2,
      [](int rank, std::shared_ptr<ProcessGroup> group) {
        torch::Tensor same = torch::ones({3});
        group->allreduce(same).wait();  // a matching one first
        torch::Tensor t = torch::ones({rank == 0 ? 10 : 20});
        if (rank == 0) group->allreduce(t).wait();
        if (rank == 1) group->broadcast(t, 0).wait();
      },
      60s, ProcessGroupOptions().debug_collectives(true));
  EXPECT_LT(Clock::now() - start, 10s);  // not the 60 s timeout
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[size_t(r)].find(c10::str("rank ", r, ": collective #2 differs between ranks")),
              std::string::npos)
        << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("rank(s) 0 issued all-reduce float32[10]"), std::string::npos)
        << errors[size_t(r)];
    EXPECT_NE(errors[size_t(r)].find("rank(s) 1 issued broadcast(root 0) float32[20]"),
              std::string::npos)
        << errors[size_t(r)];
  }
}

TEST(DebugCollectives, MatchingCollectivesGiveTheRightValues) {
  const auto errors = test::run_ranks(
      3,
      [](int rank, std::shared_ptr<ProcessGroup> group) {
        for (int i = 0; i < 20; ++i) {
          torch::Tensor t = torch::full({4}, float(rank + 1));
          group->allreduce(t).wait();
          ASSERT_EQ(t[0].item<float>(), 6.0f);
        }
        torch::Tensor b = torch::full({2}, float(rank));
        group->broadcast(b, 2).wait();
        EXPECT_EQ(b[1].item<float>(), 2.0f);
        group->barrier();
      },
      60s, ProcessGroupOptions().debug_collectives(true));
  EXPECT_EQ(errors, std::vector<std::string>(3, ""));
}

TEST(MonitoredBarrier, NamesTheRanksThatDidNotArrive) {
  const auto start = Clock::now();
  const auto errors = test::run_ranks(4, [](int rank, std::shared_ptr<ProcessGroup> group) {
    group->monitored_barrier(5s, "start-up");  // everyone
    if (rank == 2 || rank == 3) return;        // these never come to the second
    group->monitored_barrier(1s, "checkpoint of epoch 1");
  });
  EXPECT_LT(Clock::now() - start, 20s);
  for (int r : {0, 1}) {
    EXPECT_EQ(
        errors[size_t(r)],
        c10::str("rank ", r, ": checkpoint of epoch 1: rank(s) 2, 3 did not arrive within 1 s"));
  }
  EXPECT_EQ(errors[2], "");
  EXPECT_EQ(errors[3], "");
}

}  // namespace
}  // namespace ddp
