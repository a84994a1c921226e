// ddp-train's command line as a user meets it, as real processes: flags validated with clear
// errors, --dry-run, presets, --config files and the configuration they all make.
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

#include "ddp/error.h"
#include "support/parts.h"
#include "support/process.h"
#include "support/trainer_fixture.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

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

TEST_F(TrainerTest, MissingDataNamesThePath) {
  const auto r = test::run({test::train_bin(), "--data-dir", "/nonexistent/cifar"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("/nonexistent/cifar/data_batch_1.bin"), std::string::npos) << r.output;
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
  for (const char* line : {"preset = \"fast\"\n", "lr = 0.05\n", "lr_schedule = \"cosine\"\n",
                           "warmup_epochs = 0.2\n", "weight_decay = 0.0005\n", "normalize = true\n",
                           "hflip = true\n", "channels_last = true\n"}) {
    EXPECT_NE(fast.output.find(line), std::string::npos) << line << fast.output;
  }
  const auto overridden =
      dry_run({"--lr", "0.02", "--preset", "fast", "--lr-schedule", "constant"});
  ASSERT_EQ(overridden.exit_code, 0) << overridden.output;
  EXPECT_NE(overridden.output.find("lr = 0.02\n"), std::string::npos) << overridden.output;
  EXPECT_NE(overridden.output.find("lr_schedule = \"constant\"\n"), std::string::npos)
      << overridden.output;
  EXPECT_NE(overridden.output.find("normalize = true\n"), std::string::npos) << overridden.output;
  const auto reference = dry_run({});
  EXPECT_NE(reference.output.find("lr = 0.001\n"), std::string::npos) << reference.output;
  EXPECT_NE(reference.output.find("normalize = false\n"), std::string::npos) << reference.output;
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
  for (const char* line : {"lr = 0.03\n", "batch_size = 100\n", "no_pad = true\n",
                           "lr_schedule = \"cosine\"\n", "preset = \"fast\"\n"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << r.output;
  }
  EXPECT_NE(r.output.find("# config = \"" + (dir / "run.toml") + "\"\n"), std::string::npos)
      << r.output;
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

// The configuration --dry-run prints (and every checkpoint keeps) names every flag, and read back
// as a --config file it is the same configuration: with every flag away from its default, once
// with --resume and once with --init-from (they exclude each other).
TEST_F(TrainerTest, ConfigurationHasEveryFlagAndReadsBackAsItself) {
  DDP_SKIP_WITHOUT(kToml);
  test::TempDir dir;
  auto configuration = [](const std::string& output) {
    const size_t begin = output.find("configuration:\n"), end = output.find("plan: ");
    return begin == std::string::npos || end == std::string::npos
               ? std::string()
               : output.substr(begin + 15, end - begin - 15);
  };
  const auto help = test::run({test::train_bin(), "--help"});
  std::vector<std::string> keys;  // every flag but --config and --help, as a TOML key
  const std::regex flag("\n  --([a-z0-9-]+)");
  for (std::sregex_iterator it(help.output.begin(), help.output.end(), flag), end; it != end;
       ++it) {
    std::string key = (*it)[1];
    std::replace(key.begin(), key.end(), '-', '_');
    if (key != "config" && key != "help") keys.push_back(key);
  }
  EXPECT_EQ(keys.size(), 79u) << help.output;
  std::vector<std::string> all = {
      "--data-dir",       data_->path(), "--metrics",     dir / "m \"quoted\".jsonl",
      "--step-trace",     dir / "st",    "--tensorboard", dir / "tb",
      "--checkpoint-dir", dir / "ck",    "--export",      dir / "e.pt",
      "--checkpoint",     dir / "c.pt",  "--trace",       dir / "t.json",
      "--debug-dir",      dir / "dbg"};
  std::istringstream others(
      "--dataset cifar-10 --download --download-url http://mirror.example/c.tar.gz "
      "--download-md5 0123456789abcdef0123456789abcdef --normalize --random-crop --hflip "
      "--channels-last --model resnet --preset fast --epochs 3 --batch-size 32 --optimizer adam "
      "--no-pad --zero --lr 0.02 --lr-schedule constant --warmup-epochs 0.5 --momentum 0.8 "
      "--weight-decay 0.001 --seed 7 --threads 1 --max-steps 5 --log-every 7 --on-nan skip "
      "--no-eval --device cpu --precision bf16 --backend gloo --init-method "
      "tcp://127.0.0.1:29999 --timeout 30.5 --rendezvous-timeout 40 --spin-wait-ms 5 "
      "--bucket-cap-mb 10 --first-bucket-cap-mb 0.25 --comm-hook powersgd:2:10 "
      "--nproc-per-node 2 --cpu-bind cores --dry-run --no-sync-baseline --lockstep-baseline "
      "--checkpoint-every 2 --keep 4 --debug-collectives --nnodes 2:3 --rdzv-backend c10d "
      "--rdzv-endpoint 127.0.0.1:29400 --rdzv-id job7 --rdzv-conf last_call_timeout=2 "
      "--max-restarts 1 --monitor-interval 0.5 --steps 9 --grad-accum 2 --block-size 16 "
      "--grad-clip 0.5 --min-lr 1e-05 --warmup-steps 3 --beta2 0.99 --eval-every 7 "
      "--eval-batches 3");
  for (std::string word; others >> word;) all.push_back(word);
  for (const std::vector<std::string>& start :
       {std::vector<std::string>{"--resume", "auto"}, {"--init-from", dir / "init.pt"}}) {
    std::vector<std::string> argv = {test::train_bin()};
    argv.insert(argv.end(), all.begin(), all.end());
    argv.insert(argv.end(), start.begin(), start.end());
    const auto first = test::run(argv);
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const std::string text = configuration(first.output);
    for (const std::string& key : keys) {
      EXPECT_NE(("\n" + text).find("\n" + key + " = "), std::string::npos) << key << "\n" << text;
    }
    EXPECT_NE(text.find("lr = 0.02\n"), std::string::npos) << text;  // given, over the preset's
    std::ofstream(dir / "run.toml") << text;
    const auto again = test::run({test::train_bin(), "--config", dir / "run.toml"});
    ASSERT_EQ(again.exit_code, 0) << again.output;
    EXPECT_EQ(configuration(again.output), "# config = \"" + (dir / "run.toml") + "\"\n" + text);
  }
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

}  // namespace
}  // namespace ddp
