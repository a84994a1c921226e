// Checkpoints every N steps, written in the background: a run killed mid-epoch resumes from the
// newest one bit for bit as if it had never stopped, and the folder keeps the newest --keep.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <thread>

#include "ddp/checkpoint/checkpoint.h"
#include "support/process.h"
#include "support/trainer_fixture.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

class StepCheckpointTest : public TrainerTest {
 protected:
  // 2 ranks, 16 steps an epoch (2,000 images, batch 64), a checkpoint every 5 steps.
  std::vector<std::string> train(const std::string& dir, std::vector<std::string> extra) const {
    std::vector<std::string> argv = {test::train_bin(),
                                     "--data-dir",
                                     data_->path(),
                                     "--nproc-per-node",
                                     "2",
                                     "--epochs",
                                     "2",
                                     "--no-eval",
                                     "--checkpoint-dir",
                                     dir,
                                     "--checkpoint-every-steps",
                                     "5"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
};

TEST_F(StepCheckpointTest, AKilledRunResumesMidEpochBitForBit) {
  test::TempDir dir;
  const auto whole = test::run(train(dir / "whole", {}), {}, 180s);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  // Rank 1 exits at global step 23, in epoch 2: the newest checkpoint is 4 steps into it.
  const auto killed = test::run(train(dir / "ck", {}), {{"DDP_FAULT", "exit@23:1"}}, 180s);
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  ASSERT_TRUE(std::filesystem::exists(dir / "ck/checkpoint-epoch-0001-step-00000004.pt"));
  const auto resumed = test::run(train(dir / "ck", {"--resume", "auto"}), {}, 180s);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("4 step(s) into epoch 2"), std::string::npos) << resumed.output;
  EXPECT_EQ(test::weight_fingerprints(resumed.output), test::weight_fingerprints(whole.output));
  EXPECT_EQ(test::weight_fingerprints(whole.output).size(), 1u);
  // The newest 3 are kept (--keep's default): steps 9 and 14 of epoch 2, and its end.
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir / "whole")) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"checkpoint-epoch-0001-step-00000009.pt",
                                             "checkpoint-epoch-0001-step-00000014.pt",
                                             "checkpoint-epoch-0002.pt"}));
}

// A checkpoint 4 steps into epoch 2 at world size 2 resumed at world size 3 (an elastic round
// with a node more): the 512 images already trained are skipped and the other 1,488 shared out
// over the 3 ranks, which end with the same weights.
TEST_F(StepCheckpointTest, AResumeAtAnotherWorldSizeSharesOutTheRestOfTheEpoch) {
  test::TempDir dir;
  const auto killed = test::run(train(dir / "ck", {}), {{"DDP_FAULT", "exit@23:1"}}, 180s);
  ASSERT_NE(killed.exit_code, 0) << killed.output;
  std::vector<std::string> argv = train(dir / "ck", {"--resume", "auto"});
  argv[4] = "3";  // --nproc-per-node
  const auto resumed = test::run(argv, {}, 180s);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("epoch 2: 512 of its samples were trained at another world size; "
                                "the other 1488 are shared out over these 3 ranks: 8 steps"),
            std::string::npos)
      << resumed.output;
  EXPECT_EQ(test::weight_fingerprints(resumed.output).size(), 1u);
  // The new world's checkpoints count on from the old world's 4 steps (at global step 25: 4 +
  // 5), so the newest never sorts before the old one, nor is pruned for it.
  EXPECT_TRUE(std::filesystem::exists(dir / "ck/checkpoint-epoch-0001-step-00000009.pt"));
}

// SIGKILL while checkpoints are written every step (so a kill most likely lands in a background
// write): the newest finished checkpoint loads, and a partial file never has a checkpoint's name.
TEST_F(StepCheckpointTest, AKillDuringABackgroundWriteLeavesTheNewestCheckpointLoadable) {
  test::TempDir dir;
  auto checkpoints = [&] {
    int count = 0;
    std::error_code error;
    for (const auto& e : std::filesystem::directory_iterator(dir / "ck", error)) {
      count += e.path().extension() == ".pt";
    }
    return count;
  };
  test::Child job({test::train_bin(), "--data-dir", data_->path(), "--model", "resnet", "--epochs",
                   "5", "--no-eval", "--checkpoint-dir", dir / "ck", "--checkpoint-every-steps",
                   "1", "--keep", "100"},
                  {});
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (checkpoints() < 4 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);  // polling a folder another process writes: bounded
  }
  ASSERT_GE(checkpoints(), 4) << "no checkpoints";
  ::kill(job.pid(), SIGKILL);
  job.wait(30s);
  const std::string newest = latest_checkpoint(dir / "ck");
  ASSERT_FALSE(newest.empty());
  const auto eval = test::run({test::train_bin(), "evaluate", "--checkpoint", newest, "--data-dir",
                               data_->path(), "--model", "resnet"},
                              {}, 120s);
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
}

TEST_F(StepCheckpointTest, NeedsACheckpointFolder) {
  const auto r = test::run({test::train_bin(), "--checkpoint-every-steps", "5"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--checkpoint-every-steps needs --checkpoint-dir"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ddp
