// ddp-train --on-failure continue, as real processes on one node: the survivors of a rank that
// dies go on at the next step with identical weights and the rest of the epoch shared out over
// them; a newcomer started in its place takes the state from rank 0; flags that tie their state
// to one group are refused. And --on-failure restart under an elastic agent: the new round says
// what the restart lost.
#include <gtest/gtest.h>

#include <c10/util/StringUtil.h>
#include <regex>
#include <string>

#include "ddp/error.h"
#include "support/process.h"
#include "support/trainer_fixture.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_F(TrainerTest, OnFailureContinueGoesOnWithoutALostRank) {
  test::TempDir out;
  // Rank 2 exits at step 5; 2000 images over 3 ranks of 64 are 11 steps an epoch.
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "2",
                            "--no-eval", "--nproc-per-node", "3", "--on-failure", "continue",
                            "--log-every", "1", "--metrics", out / "m.jsonl"},
                           {{"DDP_FAULT", "exit@5:2"}}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 2 (local rank 2, pid"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 3; the job goes on without it"), std::string::npos);
  EXPECT_NE(r.output.find("membership change at step 4: world size 3 -> 2 (generation 2; lost: r2; "
                          "joined: none) because lost r2 silent for 3 s; 1 step(s) discarded"),
            std::string::npos)
      << r.output;
  // Step 5 is discarded and trained again: 4 steps at 3 ranks took 768 images, the other 1232
  // are 10 steps at 2 ranks. Epoch 2 is 16 steps at 2 ranks.
  EXPECT_NE(r.output.find("epoch 1 step 14/14 loss"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("epoch 1 step 15/"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("epoch 2 step 16/16 loss"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "final weights fingerprint"), 2) << r.output;
  EXPECT_EQ(test::weight_fingerprints(r.output).size(), 1u) << r.output;
  const std::string metrics = test::read_file(out / "m.jsonl");
  EXPECT_NE(metrics.find("\"event\": \"membership_change\", "), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("\"old_world\": 3, \"new_world\": 2, \"lost\": \"r2\""), std::string::npos)
      << metrics;
}

TEST_F(TrainerTest, OnFailureContinueStartsANewcomerThatTakesTheStateFromAPeer) {
  const auto r =
      test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "2", "--no-eval",
                 "--nproc-per-node", "3", "--on-failure", "continue", "--max-restarts", "1"},
                {{"DDP_FAULT", "exit@5:2"}}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("a newcomer replaces it (restart 1 of 1)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("world size 3 -> 3 (generation 2; lost: r2; joined: j1)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("rank 2: joined the running job at generation 2 (world size 3) after "
                          "step 4"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(count(r.output, "final weights fingerprint"), 3) << r.output;
  EXPECT_EQ(test::weight_fingerprints(r.output).size(), 1u) << r.output;
}

TEST_F(TrainerTest, OnFailureContinueLeavesOutAFrozenRankThatThenExits) {
  // Rank 2 stops, heartbeat and all, for 8 s at step 5: the others go on without it after 3 s;
  // woken, it finds the job went on without it and exits, naming why.
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "3",
                            "--no-eval", "--nproc-per-node", "3", "--on-failure", "continue"},
                           {{"DDP_FAULT", "freeze@5:2:8000"}}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 2: injected freeze (DDP_FAULT) at step 5 for 8000 ms"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("world size 3 -> 2 (generation 2; lost: r2; joined: none) because lost "
                          "r2 silent for 3 s"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("r2: the others went on without this member in generation 2"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("exited with code 1; the job goes on without it"), std::string::npos)
      << r.output;
  EXPECT_EQ(count(r.output, "final weights fingerprint"), 2) << r.output;
  EXPECT_EQ(test::weight_fingerprints(r.output).size(), 1u) << r.output;
}

TEST_F(TrainerTest, OnFailureContinueRefusesStateTiedToOneGroup) {
  const auto zero = test::run({test::train_bin(), "--data-dir", data_->path(), "--nproc-per-node",
                               "2", "--on-failure", "continue", "--zero"},
                              {}, 60s);
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.output.find("--on-failure continue cannot be combined with --zero: its state is "
                             "tied to one group of ranks"),
            std::string::npos)
      << zero.output;
  const auto alone = test::run(
      {test::train_bin(), "--data-dir", data_->path(), "--on-failure", "continue"}, {}, 60s);
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.output.find("--max-restarts and --on-failure are the launcher's"),
            std::string::npos)
      << alone.output;
}

TEST_F(TrainerTest, OnFailureRestartSaysHowManyStepsTheNewRoundLost) {
  test::TempDir out;
  // Rank 1 exits at step 10 of the first round only: the second resumes from the newest
  // checkpoint (step 8, or step 4 if step 8's was still being written when rank 0 was stopped).
  // Rank 0 had finished step 9; the agent may stop it before it sends that (it sends every
  // 0.1 s), so the step reached is at most 9 and at least the checkpoint's.
  const std::string first_round_fails =
      "if [ \"$TORCHELASTIC_RESTART_COUNT\" = 0 ]; then export DDP_FAULT=exit@10:1; fi; "
      "exec \"$@\"";
  const auto r = test::run({DDPRUN_BIN,
                            "--nnodes",
                            "1",
                            "--rdzv-backend",
                            "c10d",
                            "--rdzv-endpoint",
                            "127.0.0.1:" + std::to_string(test::free_port()),
                            "--rdzv-id",
                            "lost-steps",
                            "--nproc-per-node",
                            "2",
                            "--max-restarts",
                            "1",
                            "--",
                            "/bin/sh",
                            "-c",
                            first_round_fails,
                            "sh",
                            test::train_bin(),
                            "--data-dir",
                            data_->path(),
                            "--epochs",
                            "1",
                            "--no-eval",
                            "--checkpoint-dir",
                            out / "ck",
                            "--checkpoint-every-steps",
                            "4",
                            "--metrics",
                            out / "m.jsonl"},
                           {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  const std::regex line(
      "membership change: round 2, world size 2, because .*rank 1 exited with code 3; round 1 "
      "\\(world size 2\\) reached step ([0-9]+) and this one resumes at step ([48]): ([0-9]+) "
      "step\\(s\\) lost, ready [0-9.]+ s after that step");
  ASSERT_TRUE(std::regex_search(r.output, m, line)) << r.output;
  const int reached = std::stoi(m[1]), resumed = std::stoi(m[2]), lost = std::stoi(m[3]);
  EXPECT_LE(reached, 9) << r.output;
  EXPECT_GE(reached, resumed) << r.output;
  EXPECT_EQ(lost, reached - resumed) << r.output;
  const std::string metrics = test::read_file(out / "m.jsonl");
  EXPECT_NE(metrics.find("\"event\": \"membership_change\", "), std::string::npos) << metrics;
  EXPECT_NE(metrics.find(c10::str("\"reached_step\": ", reached, ", \"resumed_step\": ", resumed,
                                  ", \"steps_lost\": ", lost)),
            std::string::npos)
      << metrics;
  EXPECT_EQ(test::weight_fingerprints(r.output).size(), 1u) << r.output;
}

}  // namespace
}  // namespace ddp
