// ddp-train's GPT training against nanoGPT's train.py logic (bench/nanogpt_reference.py): the
// same initial weights, windows, schedule, AdamW groups and clipping, so the same loss at every
// step on 2 ranks, replicated and sharded; and the README's three commands.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/process.h"

namespace ddp {
namespace {

// Text every Debian machine has (base-files).
constexpr const char* kText = "/usr/share/common-licenses/GPL-3";

// Step → loss from JSON lines (ours: --metrics; the reference's: --out).
std::map<int64_t, double> losses(const std::string& path) {
  std::map<int64_t, double> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("step") && j.contains("loss"))
      out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

class GptTrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    const auto made =
        test::run({test::train_bin(), "make-data", "--tokens", kText, "--out", data_->path()});
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  static void TearDownTestSuite() { delete data_; }
  static inline test::TempDir* data_ = nullptr;
};

// The reference's flags and ours, for the same run: gpt-nano at a context of 32, 2 ranks.
void expect_same_losses_as_reference(const std::string& data, const std::string& parallel) {
  test::TempDir out;
  const std::string steps = "20";
  const auto reference =
      test::run_bench("nanogpt_reference.py", {"--data-dir",     data,
                                               "--n-layer",      "6",
                                               "--n-head",       "6",
                                               "--n-embd",       "384",
                                               "--block-size",   "32",
                                               "--vocab-size",   "256",
                                               "--batch-size",   "4",
                                               "--grad-accum",   "2",
                                               "--steps",        steps,
                                               "--lr",           "1e-3",
                                               "--min-lr",       "1e-4",
                                               "--warmup-steps", "5",
                                               "--weight-decay", "0.1",
                                               "--beta2",        "0.95",
                                               "--grad-clip",    "1.0",
                                               "--seed",         "1337",
                                               "--parallel",     parallel,
                                               "--nproc",        "2",
                                               "--port",         std::to_string(test::free_port()),
                                               "--out",          out / "reference.jsonl"});
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto ours =
      test::run({test::train_bin(),
                 "--model",
                 "gpt-nano",
                 "--dataset",
                 "tokens",
                 "--data-dir",
                 data,
                 "--block-size",
                 "32",
                 "--batch-size",
                 "4",
                 "--grad-accum",
                 "2",
                 "--steps",
                 steps,
                 "--lr",
                 "1e-3",
                 "--min-lr",
                 "1e-4",
                 "--warmup-steps",
                 "5",
                 "--lr-schedule",
                 "cosine",
                 "--optimizer",
                 "adamw",
                 "--weight-decay",
                 "0.1",
                 "--beta2",
                 "0.95",
                 "--grad-clip",
                 "1.0",
                 "--seed",
                 "1337",
                 "--parallel",
                 parallel,
                 "--nproc-per-node",
                 "2",
                 "--eval-every",
                 "0",
                 "--eval-batches",
                 "1",
                 "--metrics",
                 out / "ours.jsonl"},
                {{"MASTER_PORT", std::to_string(test::free_port())}, {"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(ours.exit_code, 0) << ours.output;
  const auto expected = losses(out / "reference.jsonl");
  const auto got = losses(out / "ours.jsonl");
  ASSERT_EQ(expected.size(), 20u) << reference.output;
  ASSERT_EQ(got.size(), 20u) << ours.output;
  for (const auto& [step, loss] : expected) {
    EXPECT_NEAR(got.at(step), loss, 1e-5) << parallel << ", step " << step;
  }
  EXPECT_LT(got.at(19), got.at(0) - 1.0);  // and it learns
}

TEST_F(GptTrainerTest, LossesEqualNanoGptsAtEveryStepUnderDdp) {
  expect_same_losses_as_reference(data_->path(), "ddp");
}

TEST_F(GptTrainerTest, LossesEqualNanoGptsAtEveryStepUnderFsdp) {
  expect_same_losses_as_reference(data_->path(), "fsdp");
}

// Train with FSDP, export, sample: what README's "Train a GPT" does, shortened.
TEST_F(GptTrainerTest, TrainedWeightsExportAndSample) {
  test::TempDir out;
  const auto trained = test::run({test::train_bin(),
                                  "--model",
                                  "gpt-nano",
                                  "--dataset",
                                  "tokens",
                                  "--data-dir",
                                  data_->path(),
                                  "--block-size",
                                  "32",
                                  "--batch-size",
                                  "4",
                                  "--steps",
                                  "3",
                                  "--optimizer",
                                  "adamw",
                                  "--parallel",
                                  "fsdp",
                                  "--nproc-per-node",
                                  "2",
                                  "--eval-every",
                                  "0",
                                  "--eval-batches",
                                  "1",
                                  "--export",
                                  out / "gpt.pt",
                                  "--metrics",
                                  out / "m.jsonl"},
                                 {{"MASTER_PORT", std::to_string(test::free_port())}});
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_NE(trained.output.find("fsdp over 2 rank(s)"), std::string::npos) << trained.output;
  EXPECT_NE(trained.output.find("step 3: val loss"), std::string::npos) << trained.output;
  const std::string metrics = test::read_file(out / "m.jsonl");
  EXPECT_NE(metrics.find("\"state_bytes_per_rank\""), std::string::npos) << metrics;
  const auto sampled = test::run({test::train_bin(), "generate", "--init-from", out / "gpt.pt",
                                  "--prompt", "GNU", "--max-new-tokens", "10"});
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_EQ(sampled.output.rfind("GNU", 0), 0u) << sampled.output;
  EXPECT_GE(sampled.output.size(), 13u);
}

TEST_F(GptTrainerTest, FlagsThatDoNotApplyAreRefused) {
  auto error_of = [](std::vector<std::string> args) {
    args.insert(args.begin(), test::train_bin());
    const auto r = test::run(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    return r.output;
  };
  const std::string dir = data_->path();
  EXPECT_NE(
      error_of({"--model", "gpt-nano", "--dataset", "cifar10"}).find("trains on --dataset tokens"),
      std::string::npos);
  EXPECT_NE(error_of({"--dataset", "tokens", "--data-dir", dir}).find("is for --model gpt-nano"),
            std::string::npos);
  EXPECT_NE(error_of({"--parallel", "fsdp"}).find("--parallel fsdp shards the GPTs"),
            std::string::npos);
  EXPECT_NE(error_of({"--model", "gpt2", "--dataset", "tokens", "--data-dir", dir,
                      "--checkpoint-dir", "/tmp/x"})
                .find("--export writes the weights"),
            std::string::npos);
  EXPECT_NE(error_of({"--model", "gpt2", "--dataset", "tokens", "--data-dir", dir, "--zero"})
                .find("use --parallel fsdp"),
            std::string::npos);
}

}  // namespace
}  // namespace ddp
