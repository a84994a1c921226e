// ddp-train end to end, as real processes: it learns, it validates its flags, and two ranks
// started by hand train together and evaluate every test image exactly once.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include <torch/cuda.h>

#include "ddp/data/synthetic.h"
#include "ddp/error.h"
#include "support/parts.h"
#include "support/process.h"
#include "tensorboard.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// The value of "key" in the last JSON line of `path` that has it.
double last_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  double value = -1;
  const std::regex re("\"" + key + "\": ([-0-9.e+]+)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) value = std::stod(m[1]);
  }
  return value;
}

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    data::write_synthetic_cifar10(data_->path(), {2000, 500, 0, 0.5});
  }
  static void TearDownTestSuite() { delete data_; }
  static test::TempDir* data_;
};
test::TempDir* TrainerTest::data_ = nullptr;

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

TEST_F(TrainerTest, RejectsBadFlagsClearly) {
  const auto unknown = test::run({test::train_bin(), "--epoch", "3"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown argument '--epoch'"), std::string::npos) << unknown.output;
  const auto range = test::run({test::train_bin(), "--batch-size", "0"});
  EXPECT_EQ(range.exit_code, 2);
  EXPECT_NE(range.output.find("--batch-size: '0' is not an integer in [1, 65536]"),
            std::string::npos)
      << range.output;
  const auto missing = test::run({test::train_bin(), "--lr"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("--lr needs a value"), std::string::npos) << missing.output;
  const auto spin = test::run({test::train_bin(), "--spin-wait-ms", "-1"});
  EXPECT_EQ(spin.exit_code, 2);
  EXPECT_NE(spin.output.find("--spin-wait-ms: '-1' is not a number in [0, 10000]"),
            std::string::npos)
      << spin.output;
  const auto dataset = test::run({test::train_bin(), "--dataset", "imagenet"});
  EXPECT_EQ(dataset.exit_code, 2);
  EXPECT_NE(dataset.output.find("unknown data set 'imagenet'"), std::string::npos)
      << dataset.output;
}

// --device: auto picks the CPU where no GPU is usable; cuda there is a clear error, not a crash.
TEST_F(TrainerTest, DeviceIsTheCpuWithoutAGpuAndCudaIsRefusedClearly) {
  const auto unknown = test::run({test::train_bin(), "--device", "gpu"});
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("--device: unknown device 'gpu'; use auto, cpu or cuda"),
            std::string::npos)
      << unknown.output;
  const auto not_an_index = test::run({test::train_bin(), "--device", "cuda:x"});
  EXPECT_EQ(not_an_index.exit_code, 2);
  EXPECT_NE(not_an_index.output.find("--device: 'cuda:x' is not cuda:N"), std::string::npos)
      << not_an_index.output;
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is usable here (scripts/gpu-check.sh)";
  for (const char* device : {"cuda", "cuda:0"}) {
    const auto cuda = test::run({test::train_bin(), "--device", device, "--data-dir", data_->path(),
                                 "--epochs", "1", "--max-steps", "1"});
    EXPECT_EQ(cuda.exit_code, 2) << cuda.output;
    EXPECT_NE(cuda.output.find(std::string("--device ") + device + ": no GPU is usable"),
              std::string::npos)
        << cuda.output;
  }
  const auto automatic = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1",
                                    "--max-steps", "1", "--no-eval"});
  EXPECT_EQ(automatic.exit_code, 0) << automatic.output;
  EXPECT_NE(automatic.output.find("device cpu, backend none"), std::string::npos)
      << automatic.output;
}

// --precision bf16 really changes the arithmetic (other weights than fp32 after the same steps)
// and still trains; an unknown precision is refused.
TEST_F(TrainerTest, Bf16PrecisionRunsUnderAutocast) {
  const auto bad = test::run({test::train_bin(), "--precision", "fp16"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--precision: unknown precision 'fp16'; use fp32 or bf16"),
            std::string::npos)
      << bad.output;
  std::map<std::string, std::string> fingerprint;
  for (const std::string precision : {"fp32", "bf16"}) {
    const auto r =
        test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1", "--max-steps",
                   "3", "--batch-size", "16", "--no-eval", "--precision", precision},
                  {}, 300s);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("precision = " + precision), std::string::npos) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("train_loss ([0-9.]+)"))) << r.output;
    EXPECT_TRUE(std::isfinite(std::stod(m[1])));
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("fingerprint ([0-9a-f]+)")));
    fingerprint[precision] = m[1];
  }
  EXPECT_NE(fingerprint["fp32"], fingerprint["bf16"]);
}

TEST_F(TrainerTest, MissingDataNamesThePath) {
  const auto r = test::run({test::train_bin(), "--data-dir", "/nonexistent/cifar"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/cifar/data_batch_1.bin"), std::string::npos) << r.output;
}

TEST_F(TrainerTest, NonFiniteLossStopsNamingTheStepAndRank) {
  // Rank 1's loss turns NaN at step 3; the averaged gradients are then NaN on every rank.
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1",
                            "--no-eval", "--nproc-per-node", "2"},
                           {{"DDP_FAULT", "nan@3:1"}}, 120s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("rank 1: non-finite loss (loss nan) at epoch 1 step 3"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("stopped before the optimizer step"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(") exited with code 1"), std::string::npos) << r.output;
}

TEST_F(TrainerTest, NonFiniteStepsCanBeSkipped) {
  test::TempDir out;
  const auto r =
      test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1", "--no-eval",
                 "--on-nan", "skip", "--max-steps", "10", "--metrics", out / "m.jsonl"},
                {{"DDP_FAULT", "nan@4"}}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(last_value(out / "m.jsonl", "skipped_steps"), 1) << test::read_file(out / "m.jsonl");
  EXPECT_GT(last_value(out / "m.jsonl", "train_loss"), 0);  // the weights stayed finite
}

TEST_F(TrainerTest, RankThatThrowsMidTrainingEndsTheJobWithItsMessage) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1",
                            "--no-eval", "--nproc-per-node", "2"},
                           {{"DDP_FAULT", "throw@3:1"}}, 120s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  EXPECT_NE(r.output.find("rank 1 (local rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exited with code 1; stopped the other workers"), std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("    ddp-train (rank 1): error: rank 1: injected fault (DDP_FAULT) at step 3"),
      std::string::npos)
      << r.output;
}

TEST_F(TrainerTest, HangingRankEndsTheJobAfterTheCollectiveTimeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1",
                            "--no-eval", "--nproc-per-node", "2", "--timeout", "3"},
                           {{"DDP_FAULT", "hang@2:1"}}, 120s);
  EXPECT_FALSE(r.timed_out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
  EXPECT_NE(r.output.find("injected hang"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0: all-reduce failed"), std::string::npos)
      << r.output;  // the cause, named
  EXPECT_NE(r.output.find("rank 0 (local rank 0"), std::string::npos) << r.output;
}

TEST_F(TrainerTest, DryRunPrintsTheConfigurationAndThePlanWithoutTraining) {
  test::TempDir out;
  const auto r = test::run({test::train_bin(), "--dry-run", "--nproc-per-node", "2", "--data-dir",
                            data_->path(), "--lr", "0.02", "--metrics", out / "m.jsonl"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("lr = 0.02"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("plan: 2 rank(s)"), std::string::npos) << r.output;
  EXPECT_NE(
      r.output.find("each rank: 1000 training images per epoch (0 padded in all), 16 steps of 64"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("10 epoch(s), 160 optimizer steps"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[rank"), std::string::npos) << "no worker was started";
  EXPECT_FALSE(test::read_file(out / "m.jsonl").size() > 0);
}

// --preset fast expands to its flags; a flag given as well wins; an unknown preset is refused.
TEST_F(TrainerTest, PresetSetsItsRecipeAndExplicitFlagsOverrideIt) {
  auto dry_run = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {test::train_bin(), "--dry-run", "--data-dir", data_->path()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return test::run(argv);
  };
  const auto fast = dry_run({"--preset", "fast"});
  ASSERT_EQ(fast.exit_code, 0) << fast.output;
  for (const char* line : {"preset = fast\n", "lr = 0.05\n", "lr_schedule = cosine\n",
                           "warmup_epochs = 0.2\n", "weight_decay = 0.0005\n", "normalize = 1\n",
                           "horizontal_flip = 1\n", "channels_last = 1\n"}) {
    EXPECT_NE(fast.output.find(line), std::string::npos) << line << fast.output;
  }
  const auto overridden =
      dry_run({"--lr", "0.02", "--preset", "fast", "--lr-schedule", "constant"});
  ASSERT_EQ(overridden.exit_code, 0) << overridden.output;
  EXPECT_NE(overridden.output.find("lr = 0.02\n"), std::string::npos) << overridden.output;
  EXPECT_NE(overridden.output.find("lr_schedule = constant\n"), std::string::npos)
      << overridden.output;
  EXPECT_NE(overridden.output.find("normalize = 1\n"), std::string::npos) << overridden.output;
  const auto reference = dry_run({});
  EXPECT_NE(reference.output.find("lr = 0.001\n"), std::string::npos) << reference.output;
  EXPECT_NE(reference.output.find("normalize = 0\n"), std::string::npos) << reference.output;
  const auto unknown = dry_run({"--preset", "fastest"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("--preset: unknown preset 'fastest'; use reference or fast"),
            std::string::npos)
      << unknown.output;
}

// --config run.toml: keys are flags (dashes or underscores), the command line overrides the file,
// and the file may choose a preset; every mistake names the file, the line and the key.
TEST_F(TrainerTest, ConfigFileSetsFlagsAndTheCommandLineOverridesIt) {
  DDP_SKIP_WITHOUT(kToml);
  test::TempDir dir;
  auto dry_run = [&](const std::string& toml, std::vector<std::string> extra) {
    std::ofstream(dir / "run.toml") << toml;
    std::vector<std::string> argv = {test::train_bin(), "--dry-run", "--data-dir",
                                     data_->path(),     "--config",  dir / "run.toml"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return test::run(argv);
  };
  const auto r = dry_run(
      "# a run\npreset = \"fast\"\nlr = 0.02\nbatch_size = 100\nno-pad = true\nhflip = false\n",
      {"--lr", "0.03"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"lr = 0.03\n", "batch_size = 100\n", "no_pad = 1\n",
                           "lr_schedule = cosine\n", "preset = fast\n"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << r.output;
  }
  EXPECT_NE(r.output.find("config = " + (dir / "run.toml")), std::string::npos) << r.output;
  struct Case {
    std::string toml, message;
  };
  for (const Case& c : std::vector<Case>{
           {"lr = 0.1\nlrr = 1\n", "run.toml:2: 'lrr': unknown key"},
           {"lr = = 3\n", "run.toml:1:6: "},
           {"no-pad = \"yes\"\n", "'no-pad': a switch takes true or false"},
           {"epochs = [1, 2]\n", "'epochs': the value must be a string or a number"},
           {"batch-size = 10\nbatch_size = 20\n", "given twice"},
           {"epochs = 0\n", "--epochs: '0' is not an integer"},
       }) {
    const auto bad = dry_run(c.toml, {});
    EXPECT_EQ(bad.exit_code, 2) << c.toml << bad.output;
    EXPECT_NE(bad.output.find(c.message), std::string::npos) << c.toml << bad.output;
  }
  const auto missing = test::run({test::train_bin(), "--config", dir / "nope.toml"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("nope.toml: cannot read it"), std::string::npos) << missing.output;
}

// On a terminal (here: as a launcher on one says, DDP_STDOUT_TTY=1) rank 0 redraws a progress
// line in place; in a pipe it does not. Either way the run ends with the summary table.
TEST_F(TrainerTest, ProgressBarOnATerminalAndASummaryTableAlways) {
  const std::vector<std::string> argv = {
      test::train_bin(), "--data-dir", data_->path(), "--epochs", "2", "--max-steps", "8"};
  const auto plain = test::run(argv, {{"DDP_STDOUT_TTY", "0"}});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("ETA"), std::string::npos) << plain.output;
  for (const char* text :
       {"summary: 2 epoch(s)", "  epoch  train_loss  test_loss  test_acc", "best test_acc ",
        "final test accuracy per class:", "    airplane ", "    truck "}) {
    EXPECT_NE(plain.output.find(text), std::string::npos) << text << plain.output;
  }
  const auto live = test::run(argv, {{"DDP_STDOUT_TTY", "1"}});
  ASSERT_EQ(live.exit_code, 0) << live.output;
  EXPECT_NE(live.output.find("epoch 1/2 [########################] 100% 8/8  loss "),
            std::string::npos)
      << live.output;
  EXPECT_NE(live.output.find("ETA 0:00\033[K\r"), std::string::npos) << live.output;
  // Through the launcher: rank 0's line is relayed with its prefix, still redrawn in place.
  std::vector<std::string> launched = argv;
  launched.insert(launched.end(), {"--nproc-per-node", "2"});
  const auto relayed = test::run(launched, {{"DDP_STDOUT_TTY", "1"}}, 120s);
  ASSERT_EQ(relayed.exit_code, 0) << relayed.output;
  EXPECT_NE(relayed.output.find("[rank 0] epoch 2/2 [########################] 100% 8/8"),
            std::string::npos)
      << relayed.output;
  EXPECT_NE(relayed.output.find("[rank 0] summary: 2 epoch(s)"), std::string::npos)
      << relayed.output;
}

// Without evaluation the summary shows no test figures (not zeros: found on the GPU machine,
// where a resumed --no-eval run printed "0.0000  0.00%").
TEST_F(TrainerTest, SummaryWithoutEvaluationShowsNoTestFigures) {
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1",
                            "--max-steps", "2", "--no-eval"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("      1      "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("          -         -  "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("0.00%"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("best test_acc"), std::string::npos) << r.output;
}

// --tensorboard DIR: one event file whose records read back (checksums, protobuf) to the same
// curves as the JSON metrics; a damaged record is reported, not misread.
TEST_F(TrainerTest, TensorBoardEventFilesReadBackToTheMetrics) {
  DDP_SKIP_WITHOUT(kTensorBoard);
  EXPECT_EQ(train::crc32c("123456789", 9), 0xe3069283u);  // the CRC-32C check value
  test::TempDir out;
  const auto r = test::run(
      {test::train_bin(), "--data-dir", data_->path(), "--epochs", "2", "--max-steps", "8",
       "--log-every", "4", "--tensorboard", out / "tb", "--metrics", out / "m.jsonl"},
      {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(out / "tb")) {
    files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("events.out.tfevents."), std::string::npos) << files[0];
  const auto events = train::read_events(files[0]);
  std::map<std::string, std::vector<train::ScalarEvent>> curves;
  for (const auto& e : events) curves[e.tag].push_back(e);
  ASSERT_EQ(curves["train/loss"].size(), 4u);  // steps 4, 8, 12, 16
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(curves["train/loss"][i].step, int64_t(4 * (i + 1)));
  ASSERT_EQ(curves["train/lr"].size(), 4u);
  EXPECT_FLOAT_EQ(curves["train/lr"][0].value, 0.001f);
  ASSERT_EQ(curves["epoch/test_accuracy"].size(), 2u);
  EXPECT_EQ(curves["epoch/test_accuracy"][1].step, 16);
  EXPECT_NEAR(curves["epoch/test_accuracy"][1].value, last_value(out / "m.jsonl", "test_acc"),
              1e-6);
  EXPECT_EQ(curves["epoch/test_loss"].size(), 2u);
  EXPECT_EQ(curves["epoch/images_per_second"].size(), 2u);

  std::string bytes = test::read_file(files[0]);
  bytes[bytes.size() - 6] ^= 0x40;  // inside the last record's message
  std::ofstream(out / "damaged", std::ios::binary) << bytes;
  try {
    train::read_events(out / "damaged");
    ADD_FAILURE() << "a damaged record was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data checksum does not match"), std::string::npos)
        << e.what();
  }
}

// ddp-train plot: a PNG and an SVG of the last run in a metrics file; bad input is a clear error.
TEST_F(TrainerTest, PlotDrawsTheMetricsAsPngAndSvg) {
  DDP_SKIP_WITHOUT(kPlot);
  test::TempDir out;
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "3",
                            "--max-steps", "4", "--metrics", out / "m.jsonl"},
                           {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto png = test::run({test::train_bin(), "plot", out / "m.jsonl", "-o", out / "c.png"});
  ASSERT_EQ(png.exit_code, 0) << png.output;
  EXPECT_NE(png.output.find("plot: 3 epoch(s)"), std::string::npos) << png.output;
  const std::string png_bytes = test::read_file(out / "c.png");
  ASSERT_GT(png_bytes.size(), 2000u);
  EXPECT_EQ(png_bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const auto svg = test::run({test::train_bin(), "plot", out / "m.jsonl", "-o", out / "c.svg"});
  ASSERT_EQ(svg.exit_code, 0) << svg.output;
  const std::string svg_text = test::read_file(out / "c.svg");
  EXPECT_NE(svg_text.find("<svg"), std::string::npos);
  // PLplot writes text as character references: the title "test accuracy" begins "&#x74;&#x65;".
  EXPECT_NE(svg_text.find("&#x74;&#x65;&#x73;&#x74;&#x20;&#x61;"), std::string::npos);
  EXPECT_EQ(svg_text.find("fill=\"#FFFFFF\"\n        fill-opacity=\"1.000000\"\n        "
                          "xml:space"),
            std::string::npos)
      << "white text on the white background";

  const auto gif = test::run({test::train_bin(), "plot", out / "m.jsonl", "-o", out / "c.gif"});
  EXPECT_EQ(gif.exit_code, 2) << gif.output;
  EXPECT_NE(gif.output.find("must end in .png or .svg"), std::string::npos) << gif.output;
  std::ofstream(out / "empty.jsonl") << "{\"step\": 1, \"loss\": 2.3}\n";
  const auto empty =
      test::run({test::train_bin(), "plot", out / "empty.jsonl", "-o", out / "e.png"});
  EXPECT_EQ(empty.exit_code, 1) << empty.output;
  EXPECT_NE(empty.output.find("no epoch records"), std::string::npos) << empty.output;
  const auto unwritable =
      test::run({test::train_bin(), "plot", out / "m.jsonl", "-o", "/nonexistent/c.png"});
  EXPECT_EQ(unwritable.exit_code, 1) << unwritable.output;
  EXPECT_NE(unwritable.output.find("cannot write it"), std::string::npos) << unwritable.output;
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

// --step-trace: each rank writes one line per step whose times follow the step's order, and the
// bench's summary reads them (the ranks wait for each other, so it reports the collective's
// latency); an earlier trace at the same prefix is replaced. A prefix in a missing directory is
// refused before training, naming the file.
TEST_F(TrainerTest, StepTraceTimesEveryStepOnEveryRank) {
  test::TempDir out;
  const std::string prefix = out / "trace";
  std::ofstream(prefix + ".1.csv") << "an earlier run's trace, longer than its header line\n";
  const auto r = test::run(
      {test::train_bin(), "--nproc-per-node", "2", "--data-dir", data_->path(), "--epochs", "1",
       "--max-steps", "6", "--batch-size", "16", "--no-eval", "--step-trace", prefix},
      {}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(prefix + "." + std::to_string(rank) + ".csv");
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(line,
              "epoch,step,start,batch_ready,forward_done,backward_done,averaged,done,cpu_seconds");
    int steps = 0;
    while (std::getline(in, line)) {
      ++steps;
      std::vector<double> v;
      std::stringstream fields(line);
      for (std::string f; std::getline(fields, f, ',');) v.push_back(std::stod(f));
      ASSERT_EQ(v.size(), 9u) << line;
      EXPECT_EQ(v[1], steps) << line;
      for (size_t i = 3; i < 8; ++i) EXPECT_LE(v[i - 1], v[i]) << "column " << i << ": " << line;
      EXPECT_GT(v[8], 0) << line;  // the step used CPU time
    }
    EXPECT_EQ(steps, 6) << "rank " << rank;
  }
  const auto summary =
      test::run({"/usr/bin/python3", test::source_dir() + "/bench/step_trace.py", "ddp=" + prefix});
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_TRUE(std::regex_search(summary.output,
                                std::regex(R"(\| ddp \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| )")))
      << summary.output;

  const auto bad = test::run({test::train_bin(), "--data-dir", data_->path(), "--max-steps", "1",
                              "--step-trace", out / "missing/trace"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--step-trace: cannot open " + (out / "missing/trace.0.csv")),
            std::string::npos)
      << bad.output;
}

// An output file that cannot be written is refused before start-up (no data read, no process
// group), naming the path; rank 0's failure ends a two-rank job.
TEST_F(TrainerTest, UnwritableOutputsFailBeforeStartUpNamingThePath) {
  const test::TempDir dir;
  const std::string out = dir.path();
  const std::string not_a_dir = out + "/file";
  std::ofstream(not_a_dir) << "x";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--metrics", out + "/missing/m.jsonl"},
       "--metrics: cannot open " + out + "/missing/m.jsonl"},
      {{"--step-trace", out + "/missing/t"},
       "--step-trace: cannot open " + out + "/missing/t.0.csv"},
      {{"--tensorboard", not_a_dir + "/tb"}, not_a_dir},
  };
  for (const auto& [flags, message] : cases) {
    std::vector<std::string> args = {test::train_bin(), "--nproc-per-node", "2", "--data-dir",
                                     data_->path(),     "--max-steps",      "1", "--no-eval"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = test::run(args, {}, 120s);
    EXPECT_NE(r.exit_code, 0) << flags[0];
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("world size"), std::string::npos)  // open_session's first line
        << flags[0] << " failed only after start-up:\n"
        << r.output;
  }
}

// The output files are opened before start-up, but a start-up that fails (here: no data) leaves
// them as it found them: no new metrics, trace or event file, and an earlier trace untouched.
TEST_F(TrainerTest, AFailedStartUpLeavesTheOutputFilesAsItFoundThem) {
  DDP_SKIP_WITHOUT(kTensorBoard);
  const test::TempDir out;
  std::ofstream(out / "old.0.csv") << "an earlier run's trace\n";
  const auto r = test::run(
      {test::train_bin(), "--nproc-per-node", "2", "--data-dir", out / "no-data", "--max-steps",
       "1", "--metrics", out / "m.jsonl", "--tensorboard", out / "tb", "--step-trace", out / "old"},
      {}, 120s);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("CIFAR-10 not found"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out / "m.jsonl"));
  EXPECT_FALSE(std::filesystem::exists(out / "old.1.csv"));
  EXPECT_TRUE(std::filesystem::is_empty(out / "tb"));
  EXPECT_EQ(test::read_file(out / "old.0.csv"), "an earlier run's trace\n");
}

TEST_F(TrainerTest, HelpListsEveryFlag) {
  const auto r = test::run({test::train_bin(), "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag :
       {"--dataset",     "--data-dir",    "--download",     "--model",        "--epochs",
        "--batch-size",  "--lr",          "--momentum",     "--weight-decay", "--seed",
        "--threads",     "--max-steps",   "--metrics",      "--log-every",    "--backend",
        "--init-method", "--normalize",   "--random-crop",  "--hflip",        "--nproc-per-node",
        "--no-pad",      "--zero",        "--comm-hook",    "--optimizer",    "--device",
        "--preset",      "--lr-schedule", "--warmup-epochs"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
  for (const char* flag : {"--no-sync-baseline", "--lockstep-baseline", "--step-trace"}) {
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  }
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
