// ddp-train trains, as real processes: it learns, its features keep the ranks identical (bf16,
// schedules, --no-pad, ResNet with SyncBatchNorm, PowerSGD, ZeRO), the overhead bench's baselines
// do what they say, and two ranks started by hand train together.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include <torch/cuda.h>
#include <torch/version.h>

#include "ddp/error.h"
#include "support/parts.h"
#include "support/process.h"
#include "support/trainer_fixture.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

TEST_F(TrainerTest, LearnsTheSyntheticDataSet) {
  test::TempDir out;
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "3", "--lr",
                            "0.01", "--metrics", out / "m.jsonl", "--log-every", "10"},
                           {}, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string metrics = test::read_file(out / "m.jsonl");
  EXPECT_NE(metrics.find("{\"step\": 10, \"epoch\": 1, \"loss\": "), std::string::npos) << metrics;
  EXPECT_NE(r.output.find("epoch 3/3"), std::string::npos) << r.output;
  std::ifstream in(out / "m.jsonl");
  std::vector<double> epoch_losses;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, std::regex("\"train_loss\": ([-0-9.e+]+)")))
      epoch_losses.push_back(std::stod(m[1]));
  }
  ASSERT_EQ(epoch_losses.size(), 3u);
  EXPECT_LT(epoch_losses[2], epoch_losses[0] * 0.8);
  EXPECT_GT(last_value(out / "m.jsonl", "test_acc"), 0.6);  // chance is 0.1
}

// --precision bf16 and fp16 really change the arithmetic (other weights than fp32 after the same
// steps) and still train, fp16 with its loss scale said; an unknown precision is refused, and
// fp16 with --zero.
TEST_F(TrainerTest, LowPrecisionsRunUnderAutocast) {
  const auto bad = test::run({test::train_bin(), "--precision", "fp8"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--precision: unknown precision 'fp8'; use fp32, bf16 or fp16"),
            std::string::npos)
      << bad.output;
  const auto zero = test::run({test::train_bin(), "--precision", "fp16", "--zero"});
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_NE(zero.output.find("--precision fp16 cannot be combined with --zero"), std::string::npos)
      << zero.output;
  // fp16 on the CPU: from LibTorch 2.4 (older CPU autocast knows bf16 only, and says so).
  const bool fp16 =
      TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4);
  std::vector<std::string> precisions = {"fp32", "bf16"};
  if (fp16) precisions.push_back("fp16");
  std::map<std::string, std::string> fingerprint;
  for (const std::string& precision : precisions) {
    const auto r =
        test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1", "--max-steps",
                   "3", "--batch-size", "16", "--no-eval", "--precision", precision},
                  {}, 300s);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    // The configuration line shows what differs from the defaults: bf16 does, fp32 does not.
    EXPECT_EQ(r.output.find("precision = \"" + precision + "\"") != std::string::npos,
              precision != "fp32")
        << r.output;
    EXPECT_EQ(r.output.find("loss scale ") != std::string::npos, precision == "fp16") << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("train_loss ([0-9.]+)"))) << r.output;
    EXPECT_TRUE(std::isfinite(std::stod(m[1])));
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("fingerprint ([0-9a-f]+)")));
    fingerprint[precision] = m[1];
  }
  EXPECT_NE(fingerprint["fp32"], fingerprint["bf16"]);
  if (!fp16) return;
  EXPECT_NE(fingerprint["fp32"], fingerprint["fp16"]);
  // On two ranks the loss scaler's verdicts agree (the gradients are averaged first): one set of
  // weights.
  const auto two = test::run(
      {test::train_bin(), "--data-dir", data_->path(), "--epochs", "1", "--max-steps", "3",
       "--batch-size", "16", "--no-eval", "--precision", "fp16", "--nproc-per-node", "2"},
      {}, 300s);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  EXPECT_EQ(test::weight_fingerprints(two.output).size(), 1u) << two.output;
}

// The learning rate of every step (the metrics' "lr"): linear warm-up over half an epoch of 16
// steps, then a half cosine that reaches almost 0 at the last of 64 steps.
TEST_F(TrainerTest, WarmupThenCosineScheduleIsTheRateOfEachStep) {
  test::TempDir out;
  const auto r =
      test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "2", "--no-eval",
                 "--lr", "0.1", "--lr-schedule", "cosine", "--warmup-epochs", "0.5", "--log-every",
                 "1", "--metrics", out / "m.jsonl"},
                {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(out / "m.jsonl");
  std::vector<double> lr;  // by step, from step 1
  const std::regex re("\"step\": (\\d+).*\"lr\": ([-0-9.e+]+)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) {
      ASSERT_EQ(std::stoul(m[1]), lr.size() + 1) << line;
      lr.push_back(std::stod(m[2]));
    }
  }
  ASSERT_EQ(lr.size(), 64u);  // 2000 images / 64 per step = 32 steps per epoch
  for (int s = 0; s < 16; ++s) EXPECT_NEAR(lr[size_t(s)], 0.1 * (s + 1) / 16, 1e-9) << s;
  for (size_t s = 16; s < lr.size(); ++s) {
    EXPECT_NEAR(lr[s], 0.05 * (1 + std::cos(M_PI * double(s - 16) / 48)), 1e-9) << s;
  }
  EXPECT_LT(lr.back(), 0.001);
}

// --no-pad: 2000 images over 3 ranks are 667, 667 and 666; in batches of 111 that is 7, 7 and
// 6 steps, so rank 2 joins for the last step. Every image is seen once, nobody hangs, and the
// ranks end with the same weights.
TEST_F(TrainerTest, NoPadVisitsEveryImageOnceAndTheShortRankJoins) {
  test::TempDir out;
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv = {test::train_bin(),
                                     "--nproc-per-node",
                                     "3",
                                     "--data-dir",
                                     data_->path(),
                                     "--epochs",
                                     "2",
                                     "--batch-size",
                                     "111",
                                     "--metrics",
                                     out / name};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return test::run(argv, {}, 300s);
  };
  const auto unpadded = run("nopad.jsonl", {"--no-pad"});
  ASSERT_EQ(unpadded.exit_code, 0) << unpadded.output;
  EXPECT_EQ(test::weight_fingerprints(unpadded.output).size(), 1u) << unpadded.output;
  EXPECT_EQ(last_value(out / "nopad.jsonl", "train_images"), 2000);
  const auto padded = run("pad.jsonl", {"--epochs", "1"});
  ASSERT_EQ(padded.exit_code, 0) << padded.output;
  EXPECT_EQ(last_value(out / "pad.jsonl", "train_images"), 2001);  // one image repeated
  // The same with the optimizer state sharded: joined ranks take part in the shard broadcasts.
  const auto sharded = run("zero.jsonl", {"--no-pad", "--zero", "--optimizer", "adam"});
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_EQ(test::weight_fingerprints(sharded.output).size(), 1u) << sharded.output;
}

TEST_F(TrainerTest, NoPadWithSyncBatchNormIsRefusedClearly) {
  const auto r = test::run({test::train_bin(), "--nproc-per-node", "2", "--data-dir", data_->path(),
                            "--model", "resnet", "--no-pad", "--epochs", "1"},
                           {}, 120s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--no-pad cannot be used with --model resnet"), std::string::npos)
      << r.output;
}

// The features beyond PyTorch's DDP together, end to end: ResNet with SyncBatchNorm, PowerSGD
// after one warm-up step, Adam with sharded state. The ranks stay identical and the metrics
// report compressed bytes and sharded optimizer state.
TEST_F(TrainerTest, ResnetWithPowerSgdAndZeroKeepsRanksIdentical) {
  test::TempDir out;
  const auto base = std::vector<std::string>{test::train_bin(),
                                             "--nproc-per-node",
                                             "2",
                                             "--data-dir",
                                             data_->path(),
                                             "--model",
                                             "resnet",
                                             "--epochs",
                                             "1",
                                             "--max-steps",
                                             "3",
                                             "--batch-size",
                                             "16",
                                             "--optimizer",
                                             "adam"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = base;
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  };
  const auto plain = test::run(with({"--metrics", out / "plain.jsonl"}), {}, 300s);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const auto r = test::run(
      with({"--comm-hook", "powersgd:2:1", "--zero", "--metrics", out / "beyond.jsonl"}), {}, 300s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("SyncBatchNorm layer(s) take their statistics over all 2 ranks"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("optimizer state (--zero)"), std::string::npos) << r.output;
  EXPECT_EQ(test::weight_fingerprints(r.output).size(), 1u) << r.output;
  const double plain_bytes = last_value(out / "plain.jsonl", "comm_bytes_per_step");
  const double compressed = last_value(out / "beyond.jsonl", "comm_bytes_per_step");
  EXPECT_GT(plain_bytes, 0);
  EXPECT_LT(compressed, plain_bytes / 4) << "PowerSGD rank 2 sends far less than the gradients";
  EXPECT_LT(last_value(out / "beyond.jsonl", "optimizer_state_mb"),
            0.75 * last_value(out / "plain.jsonl", "optimizer_state_mb"));
}

// The overhead bench's two baselines: neither averages gradients, so the ranks (different data)
// end with different weights; the lockstep one still waits for the other rank every step, and
// that wait is reported as exposed communication.
TEST_F(TrainerTest, BaselinesForTheOverheadBenchTrainWithoutAveraging) {
  test::TempDir out;
  auto run = [&](const std::string& mode) {
    return test::run({test::train_bin(), "--nproc-per-node", "2", "--data-dir", data_->path(),
                      "--epochs", "1", "--max-steps", "5", "--batch-size", "16", "--no-eval",
                      "--metrics", out / (mode + ".jsonl"), "--" + mode + "-baseline"},
                     {}, 120s);
  };
  for (const std::string mode : {"no-sync", "lockstep"}) {
    const auto r = run(mode);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("--" + mode + "-baseline: gradients are NOT averaged"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(test::weight_fingerprints(r.output).size(), 2u) << r.output;
    const double exposed = last_value(out / (mode + ".jsonl"), "comm_exposed_seconds");
    if (mode == "lockstep") {
      EXPECT_GT(exposed, 0);
    } else {
      EXPECT_EQ(exposed, 0);
    }
  }
}

// The CPU tensor cache (ddp::cache_cpu_tensors()): on by default, off with
// DDP_CPU_TENSOR_CACHE=0 with the very same weights (it moves memory, not arithmetic), and any
// other value refused, naming the variable.
TEST_F(TrainerTest, TensorCacheIsOnByDefaultAndTheEnvironmentTurnsItOff) {
  test::TempDir out;
  auto run = [&](const std::string& name, const std::string& setting) {
    std::map<std::string, std::string> env;
    if (!setting.empty()) env["DDP_CPU_TENSOR_CACHE"] = setting;
    return test::run(
        {test::train_bin(), "--nproc-per-node", "2", "--data-dir", data_->path(), "--epochs", "1",
         "--max-steps", "5", "--no-eval", "--metrics", out / (name + ".jsonl")},
        env, 120s);
  };
  const auto cached = run("cached", "");
  ASSERT_EQ(cached.exit_code, 0) << cached.output;
  EXPECT_NE(cached.output.find("CPU tensor blocks of 1 MiB and more cached for reuse"),
            std::string::npos)
      << cached.output;
  EXPECT_GT(last_value(out / "cached.jsonl", "tensor_cache_mb"), 10);  // activations at batch 64
  EXPECT_GT(last_value(out / "cached.jsonl", "tensor_cache_misses"), 0);

  const auto uncached = run("uncached", "0");
  ASSERT_EQ(uncached.exit_code, 0) << uncached.output;
  EXPECT_NE(uncached.output.find("CPU tensors not cached (DDP_CPU_TENSOR_CACHE=0)"),
            std::string::npos)
      << uncached.output;
  EXPECT_EQ(last_value(out / "uncached.jsonl", "tensor_cache_mb"), 0);
  EXPECT_EQ(test::weight_fingerprints(uncached.output), test::weight_fingerprints(cached.output));

  const auto refused = run("refused", "yes");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("environment variable DDP_CPU_TENSOR_CACHE is 'yes'"),
            std::string::npos)
      << refused.output;
}

TEST_F(TrainerTest, TwoRanksStartedByHandTrainTogether) {
  test::TempDir out;
  const int port = test::free_port();
  std::vector<std::unique_ptr<test::Child>> ranks;
  for (int r = 0; r < 2; ++r) {
    // (Appended, not "m" + ...: GCC 12 in C++20 warns falsely of an overflow in that insert.)
    std::string metrics_name = "m";
    metrics_name += std::to_string(r) + ".jsonl";
    ranks.push_back(std::make_unique<test::Child>(
        std::vector<std::string>{test::train_bin(), "--data-dir", data_->path(), "--epochs", "1",
                                 "--max-steps", "5", "--metrics", out / metrics_name,
                                 "--init-method", "tcp://127.0.0.1:" + std::to_string(port)},
        std::map<std::string, std::string>{{"RANK", std::to_string(r)},
                                           {"WORLD_SIZE", "2"},
                                           {"LOCAL_RANK", std::to_string(r)},
                                           {"LOCAL_WORLD_SIZE", "2"}}));
  }
  const auto r0 = ranks[0]->wait(120s);
  const auto r1 = ranks[1]->wait(120s);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_NE(r0.output.find("world size 2"), std::string::npos) << r0.output;
  EXPECT_NE(r0.output.find("1 intra-op thread(s) per worker (2 cores / 2 local workers)"),
            std::string::npos)
      << r0.output;
  EXPECT_NE(r0.output.find("(500 images)"), std::string::npos)
      << r0.output;                                        // every test image once
  EXPECT_TRUE(test::read_file(out / "m1.jsonl").empty());  // only rank 0 writes
  EXPECT_GT(last_value(out / "m0.jsonl", "test_acc"), 0.0);
}

}  // namespace
}  // namespace ddp
