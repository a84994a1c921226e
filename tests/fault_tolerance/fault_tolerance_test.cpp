// FaultTolerantGroup, one thread per member over an in-memory store: the survivors of a lost
// member agree on every step and go on in a smaller group; a newcomer is admitted at a step
// boundary and takes the state from rank 0; too few members left ends the job.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "ddp/error.h"
#include "ddp/fault_tolerance/fault_tolerance.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

FaultToleranceOptions fast_options() {
  return FaultToleranceOptions().heartbeat_interval(100ms).missed_heartbeats(3).group(
      ProcessGroupOptions().timeout(20s).rendezvous_timeout(20s));
}

// One step: every member adds 1; returns the sum (the group's size) or -1 when a collective
// failed, after voting.
struct StepResult {
  double sum = -1;
  StepVerdict verdict;
};
StepResult step(FaultTolerantGroup& ft) {
  StepResult r;
  bool ok = true;
  try {
    torch::Tensor t = torch::ones({1000});
    ft.group()->allreduce(t).wait();
    r.sum = t[0].item<double>();
  } catch (const PeerFailure&) {
    ok = false;
  }
  r.verdict = ft.vote(ok);
  return r;
}

// A member runs steps until `steps` have committed; its group's size and its all-reduce's sum
// at each committed step go to `sizes` and `sums`.
void run_member(FaultTolerantGroup& ft, int steps, std::vector<int>& sizes,
                std::vector<double>& sums, const std::function<void(int)>& after_commit = nullptr) {
  while (int(sizes.size()) < steps) {
    const int size = ft.membership().size();
    const StepResult r = step(ft);
    if (r.verdict.commit) {
      sizes.push_back(size);
      sums.push_back(r.sum);
      if (after_commit) after_commit(int(sizes.size()));
    }
    if (r.verdict.reconfigure) {
      ft.reconfigure();
      // Newcomers take the state: here, the number of steps committed.
      if (!ft.membership().joined.empty()) {
        std::string state = std::to_string(sizes.size());
        broadcast_bytes(*ft.group(), state);
      }
    }
  }
}

TEST(FaultTolerantGroupTest, SurvivorsOfALostMemberAgreeOnEveryStepAndGoOnSmaller) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::vector<int>> sizes(3);
  std::vector<std::vector<double>> sums(3);
  std::vector<std::string> errors(3);
  std::vector<Membership> last(3);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto ft = FaultTolerantGroup::start(store, rank, 3, fast_options());
        if (rank == 2) {
          // Dies after 5 committed steps: its group goes, its sockets close, its heartbeat stops.
          run_member(*ft, 5, sizes[rank], sums[rank]);
          return;
        }
        run_member(*ft, 12, sizes[rank], sums[rank]);
        ft->finish();
        last[rank] = ft->membership();
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(sizes[rank].size(), 12u);
    // Every committed step's sum is its group's size: no step committed half-done.
    for (size_t i = 0; i < sums[rank].size(); ++i) EXPECT_EQ(sums[rank][i], sizes[rank][i]);
    EXPECT_EQ(sizes[rank].front(), 3);
    EXPECT_EQ(sizes[rank].back(), 2);
    EXPECT_EQ(last[rank].members, (std::vector<std::string>{"r0", "r1"}));
    EXPECT_EQ(last[rank].rank, rank);  // the survivors keep their order
  }
  EXPECT_EQ(sizes[0], sizes[1]);  // the same verdict on every step
  EXPECT_EQ(last[0].lost, (std::vector<std::string>{"r2"}));
  EXPECT_GE(last[0].generation, 2);
}

TEST(FaultTolerantGroupTest, ANewcomerIsAdmittedAtAStepBoundaryAndTakesTheState) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::vector<int>> sizes(3);
  std::vector<std::vector<double>> sums(3);
  std::vector<std::string> errors(3);
  std::atomic<bool> third_may_join{false};
  std::string newcomer_state;
  Membership newcomer;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto ft = FaultTolerantGroup::start(store, rank, 2, fast_options());
        run_member(*ft, 10, sizes[rank], sums[rank], [&](int committed) {
          if (committed != 3) return;
          third_may_join = true;  // and go on once it has announced itself
          while (store->add("ft/joiners", 0) < 1) std::this_thread::sleep_for(1ms);
        });
        ft->finish();
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  threads.emplace_back([&] {
    try {
      while (!third_may_join) std::this_thread::sleep_for(1ms);
      auto ft = FaultTolerantGroup::join(store, fast_options());
      newcomer = ft->membership();
      broadcast_bytes(*ft->group(), newcomer_state);
      for (int i = std::stoi(newcomer_state); i < 10; ++i) {
        const StepResult r = step(*ft);
        ASSERT_TRUE(r.verdict.commit);
        sums[2].push_back(r.sum);
      }
      ft->finish();
    } catch (const std::exception& e) {
      errors[2] = e.what();
    }
  });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(newcomer.members, (std::vector<std::string>{"r0", "r1", "j1"}));
  EXPECT_EQ(newcomer.joined, (std::vector<std::string>{"j1"}));
  EXPECT_EQ(newcomer.rank, 2);
  EXPECT_GE(std::stoi(newcomer_state), 3);
  EXPECT_EQ(sizes[0], sizes[1]);
  EXPECT_EQ(sizes[0].back(), 3);
  // The newcomer's steps are the last ones of the others, in a group of three.
  ASSERT_FALSE(sums[2].empty());
  for (double s : sums[2]) EXPECT_EQ(s, 3);
  EXPECT_EQ(sums[2].size() + size_t(std::stoi(newcomer_state)), 10u);
}

TEST(FaultTolerantGroupTest, FewerMembersThanTheMinimumEndTheJob) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::string error;
  std::thread lost([&] {
    auto ft = FaultTolerantGroup::start(store, 1, 2, fast_options().min_size(2));
    step(*ft);  // then gone, without finish()
  });
  try {
    auto ft = FaultTolerantGroup::start(store, 0, 2, fast_options().min_size(2));
    step(*ft);
    lost.join();
    for (int i = 0; i < 3; ++i) {
      if (step(*ft).verdict.reconfigure) ft->reconfigure();
    }
  } catch (const DistributedError& e) {
    error = e.what();
  }
  if (lost.joinable()) lost.join();
  EXPECT_NE(error.find("only 1 member(s) left (r0), fewer than the 2 the job needs"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace ddp
