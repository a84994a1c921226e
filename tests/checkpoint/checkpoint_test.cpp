// Checkpoints: exact resume (one process and several), Python interop both ways, and bad or
// interrupted checkpoints rejected without losing the last good one.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>
#include <type_traits>

#include <torch/torch.h>

#include "checkpoint/pickle_guard.h"  // the library's own, from src/
#include "created_file_guard.h"
#include "ddp/atomic_file.h"
#include "ddp/checkpoint/checkpoint.h"
#include "ddp/data/cifar10.h"
#include "ddp/data/synthetic.h"
#include "ddp/error.h"
#include "ddp/models/net.h"
#include "metrics.h"
#include "support/process.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

using test::weight_fingerprints;

class CheckpointTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    data::write_synthetic_cifar10(data_->path(), data::SyntheticOptions(800, 300).seed(0));
  }
  static void TearDownTestSuite() { delete data_; }
  std::vector<std::string> train(std::vector<std::string> extra) const {
    std::vector<std::string> argv = {test::train_bin(),
                                     "--data-dir",
                                     data_->path(),
                                     "--max-steps",
                                     "6",
                                     "--lr",
                                     "0.01",
                                     "--no-eval",
                                     "--threads",
                                     "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  static test::TempDir* data_;
};
test::TempDir* CheckpointTest::data_ = nullptr;

TEST_F(CheckpointTest, StopAndResumeIsBitIdenticalToAnUninterruptedRun) {
  test::TempDir dir;
  const auto whole = test::run(train({"--epochs", "3"}));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto first = test::run(train({"--epochs", "2", "--checkpoint-dir", dir / "ck"}));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto rest =
      test::run(train({"--epochs", "3", "--checkpoint-dir", dir / "ck", "--resume", "auto"}));
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("after epoch 2"), std::string::npos) << rest.output;
  EXPECT_EQ(weight_fingerprints(rest.output), weight_fingerprints(whole.output));
  EXPECT_EQ(weight_fingerprints(whole.output).size(), 1u);
}

TEST_F(CheckpointTest, KilledRunResumesToTheSameWeights) {
  test::TempDir dir;
  const auto whole = test::run(train({"--epochs", "4"}));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  {
    test::Child run(train({"--epochs", "4", "--checkpoint-dir", dir / "ck"}), {});
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (!path_exists(checkpoint_path(dir / "ck", 1)) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);  // waiting for the child's first checkpoint, bounded
    }
    ASSERT_TRUE(path_exists(checkpoint_path(dir / "ck", 1)));
    ::kill(run.pid(), SIGKILL);
    run.wait(10s);
  }
  const auto rest =
      test::run(train({"--epochs", "4", "--checkpoint-dir", dir / "ck", "--resume", "auto"}));
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("resumed from"), std::string::npos) << rest.output;
  EXPECT_EQ(weight_fingerprints(rest.output), weight_fingerprints(whole.output));
}

TEST_F(CheckpointTest, KilledMultiProcessRunResumesToTheSameWeights) {
  test::TempDir dir;
  const auto whole = test::run(train({"--nproc-per-node", "2", "--epochs", "3"}), {}, 180s);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  {
    test::Child run(
        train({"--nproc-per-node", "2", "--epochs", "3", "--checkpoint-dir", dir / "ck"}), {});
    const auto deadline = std::chrono::steady_clock::now() + 90s;
    while (!path_exists(checkpoint_path(dir / "ck", 1)) &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);  // waiting for the job's first checkpoint, bounded
    }
    ASSERT_TRUE(path_exists(checkpoint_path(dir / "ck", 1)));
    ::kill(run.pid(), SIGKILL);  // the launcher; its workers die with it
    run.wait(10s);
  }
  const auto rest = test::run(train({"--nproc-per-node", "2", "--epochs", "3", "--checkpoint-dir",
                                     dir / "ck", "--resume", "auto"}),
                              {}, 180s);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("resumed from"), std::string::npos) << rest.output;
  EXPECT_EQ(weight_fingerprints(rest.output), weight_fingerprints(whole.output));
}

TEST_F(CheckpointTest, DistributedEvaluateEqualsSingleProcess) {
  test::TempDir dir;
  ASSERT_EQ(test::run(train({"--epochs", "1", "--export", dir / "m.pt"})).exit_code, 0);
  const auto one = test::run(
      {test::train_bin(), "evaluate", "--checkpoint", dir / "m.pt", "--data-dir", data_->path()});
  const auto two =
      test::run({DDPRUN_BIN, "--nproc-per-node", "3", "--", test::train_bin(), "evaluate",
                 "--checkpoint", dir / "m.pt", "--data-dir", data_->path()},
                {}, 120s);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const std::regex re("test_loss ([0-9.]+)  test_acc ([0-9.]+)% \\((\\d+) images\\)");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(one.output, a, re)) << one.output;
  ASSERT_TRUE(std::regex_search(two.output, b, re)) << two.output;
  EXPECT_NEAR(std::stod(a[1]), std::stod(b[1]), 1e-5);
  EXPECT_EQ(a[2], b[2]);
  EXPECT_EQ(b[3], "300");
}

TEST_F(CheckpointTest, MultiProcessResumeIsBitIdentical) {
  test::TempDir dir;
  const auto whole = test::run(train({"--nproc-per-node", "2", "--epochs", "3"}), {}, 180s);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto first = test::run(
      train({"--nproc-per-node", "2", "--epochs", "2", "--checkpoint-dir", dir / "ck"}), {}, 180s);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto rest = test::run(train({"--nproc-per-node", "2", "--epochs", "3", "--checkpoint-dir",
                                     dir / "ck", "--resume", "auto"}),
                              {}, 180s);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_EQ(weight_fingerprints(whole.output).size(), 1u) << whole.output;  // both ranks agree
  EXPECT_EQ(weight_fingerprints(rest.output), weight_fingerprints(whole.output));
}

// A --zero checkpoint holds the consolidated optimizer state: it resumes without --zero to the
// weights of a run that was never sharded (ZeRO's Adam steps each parameter exactly as Adam).
TEST_F(CheckpointTest, ZeroCheckpointResumesUnshardedToTheSameWeights) {
  test::TempDir dir;
  const std::vector<std::string> adam = {"--nproc-per-node", "2", "--optimizer", "adam"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), adam.begin(), adam.end());
    return train(extra);
  };
  const auto whole = test::run(with({"--epochs", "3"}), {}, 180s);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto first =
      test::run(with({"--epochs", "2", "--zero", "--checkpoint-dir", dir / "ck"}), {}, 180s);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto rest = test::run(
      with({"--epochs", "3", "--checkpoint-dir", dir / "ck", "--resume", "auto"}), {}, 180s);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_NE(rest.output.find("resumed from"), std::string::npos) << rest.output;
  EXPECT_EQ(weight_fingerprints(rest.output), weight_fingerprints(whole.output));
}

TEST_F(CheckpointTest, ResumeWithAnotherWorldSizeWorksAndSaysSo) {
  test::TempDir dir;
  ASSERT_EQ(test::run(train({"--epochs", "1", "--checkpoint-dir", dir / "ck"})).exit_code, 0);
  const auto r = test::run(train({"--nproc-per-node", "2", "--epochs", "2", "--checkpoint-dir",
                                  dir / "ck", "--resume", "auto"}),
                           {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not bit-identical"), std::string::npos) << r.output;
}

TEST_F(CheckpointTest, ExportLoadsInPythonWithTheSamePredictions) {
  test::TempDir dir;
  const auto r = test::run(train({"--epochs", "1", "--export", dir / "model.pt"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto py = test::run_python("state_dict_interop.py",
                                   {"predict", dir / "model.pt", data_->path(), dir / "py.txt"});
  ASSERT_EQ(py.exit_code, 0) << py.output;

  models::Net net;
  load_state_dict(*net, read_state_dict(dir / "model.pt"), "model.pt");
  net->eval();
  data::Cifar10Dataset test(data_->path(), data::Split::kTest);
  torch::Tensor images = torch::empty({int64_t(test.size()), 3, 32, 32});
  for (size_t i = 0; i < test.size(); ++i) {
    images[int64_t(i)] =
        torch::from_blob(const_cast<uint8_t*>(test.image(i)), {3, 32, 32}, torch::kUInt8)
            .to(torch::kFloat32)
            .div(255);
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor predictions = net->forward(images).argmax(1);
  std::ifstream in(dir / "py.txt");
  for (int64_t i = 0; i < predictions.size(0); ++i) {
    int64_t p = -1;
    in >> p;
    ASSERT_EQ(p, predictions[i].item<int64_t>()) << "image " << i;
  }
}

TEST_F(CheckpointTest, PythonStateDictInitializesTraining) {
  test::TempDir dir;
  const auto py =
      test::run_python("state_dict_interop.py", {"save", "5", "3", "32", dir / "py.pt"});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  // Bit for bit the tensors Python saved (Python's init with seed 5 equals ours with seed 5).
  torch::manual_seed(5);
  models::Net expected;
  const auto state = read_state_dict(dir / "py.pt");
  for (const auto& p : expected->named_parameters()) {
    ASSERT_TRUE(state.count(p.key())) << p.key();
    EXPECT_TRUE(torch::equal(state.at(p.key()), p.value())) << p.key();
  }
  // And the trainer starts from them: evaluating them gives Python's loss.
  const auto predict = test::run_python("state_dict_interop.py",
                                        {"predict", dir / "py.pt", data_->path(), dir / "p.txt"});
  ASSERT_EQ(predict.exit_code, 0) << predict.output;
  std::ifstream in(dir / "p.txt");
  std::string line, last;
  while (std::getline(in, line)) last = line;
  const auto eval = test::run(
      {test::train_bin(), "evaluate", "--checkpoint", dir / "py.pt", "--data-dir", data_->path()});
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(eval.output, m, std::regex("test_loss ([0-9.]+)"))) << eval.output;
  EXPECT_NEAR(std::stod(m[1]), std::stod(last), 1e-4);
  const auto init = test::run(train({"--epochs", "1", "--init-from", dir / "py.pt"}));
  ASSERT_EQ(init.exit_code, 0) << init.output;
  EXPECT_NE(init.output.find("initial weights from"), std::string::npos);
}

// A checkpoint written by ddp-train built against Debian 12's LibTorch 1.13
// (tests/compat/write_checkpoint_fixture.sh, run in scripts/fresh-root.sh --libtorch debian)
// evaluates here to the accuracy 1.13 measured, and training resumes from it; Python's
// torch.load reads both checkpoints with its defaults.
TEST_F(CheckpointTest, CheckpointFromLibTorch113EvaluatesAndResumesHere) {
  const std::string fixture = test::source_dir() + "/tests/compat/checkpoint-libtorch-1.13.0";
  const double accuracy = std::stod(test::read_file(fixture + ".test_acc"));
  test::TempDir dir;
  data::write_synthetic_cifar10(dir / "data",
                                data::SyntheticOptions(256, 64).seed(7));  // the fixture's data set
  const auto eval = test::run(
      {test::train_bin(), "evaluate", "--checkpoint", fixture + ".pt", "--data-dir", dir / "data"});
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  char expected[32];
  std::snprintf(expected, sizeof expected, "test_acc %.2f%%", 100 * accuracy);
  EXPECT_NE(eval.output.find(expected), std::string::npos) << expected << "\n" << eval.output;
  std::filesystem::create_directories(dir / "ck");
  std::filesystem::copy_file(fixture + ".pt", dir / "ck/checkpoint-epoch-0001.pt");
  const auto resumed =
      test::run({test::train_bin(), "--data-dir", dir / "data", "--epochs", "2", "--threads", "1",
                 "--checkpoint-dir", dir / "ck", "--resume", "auto"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("after epoch 1"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("epoch 2/2"), std::string::npos) << resumed.output;
  // Both load in this PyTorch with torch.load's defaults (weights_only=True from 2.6).
  for (const std::string& path : {fixture + ".pt", dir / "ck/checkpoint-epoch-0002.pt"}) {
    const auto loaded = test::run_python("load_checkpoint.py", {path});
    ASSERT_EQ(loaded.exit_code, 0) << path << "\n" << loaded.output;
    EXPECT_NE(loaded.output.find("model conv1.bias conv1.weight conv2.bias"), std::string::npos)
        << loaded.output;
  }
}

TEST_F(CheckpointTest, TruncatedCheckpointIsRejectedAndNotOverwritten) {
  test::TempDir dir;
  ASSERT_EQ(test::run(train({"--epochs", "1", "--checkpoint-dir", dir / "ck"})).exit_code, 0);
  const std::string path = checkpoint_path(dir / "ck", 1);
  const std::string bytes = test::read_file(path);
  write_file_atomic(path, bytes.substr(0, bytes.size() / 2));
  const auto r =
      test::run(train({"--epochs", "3", "--checkpoint-dir", dir / "ck", "--resume", "auto"}));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find(path + ": not a readable checkpoint"), std::string::npos) << r.output;
  EXPECT_EQ(test::read_file(path), bytes.substr(0, bytes.size() / 2));  // untouched
  EXPECT_FALSE(path_exists(checkpoint_path(dir / "ck", 2)));
}

TEST_F(CheckpointTest, CheckpointOfAnotherModelListsTheDifferences) {
  test::TempDir dir;
  ASSERT_EQ(test::run(train({"--epochs", "1", "--checkpoint-dir", dir / "ck"})).exit_code, 0);
  data::write_synthetic_idx(dir / "idx", data::SyntheticOptions(50, 20).seed(0));
  const auto r = test::run({test::train_bin(), "evaluate", "--dataset", "mnist", "--data-dir",
                            dir / "idx", "--checkpoint", checkpoint_path(dir / "ck", 1)});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("does not fit this model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(
                "conv1.weight has shape [64, 3, 3, 3] in the file but [64, 1, 3, 3] in the model"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("fc.weight has shape [10, 8192] in the file but [10, 6272]"),
            std::string::npos)
      << r.output;
}

TEST_F(CheckpointTest, WrongFormatVersionIsNamed) {
  test::TempDir dir;
  c10::Dict<c10::IValue, c10::IValue> dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("format", std::string("ddp.cpp checkpoint"));
  dict.insert("version", int64_t(99));
  const auto bytes = torch::pickle_save(c10::IValue(dict));
  write_file_atomic(dir / "future.pt", bytes.data(), bytes.size());
  models::Net net;
  try {
    load_checkpoint(dir / "future.pt", *net, nullptr);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("format version 99, but this build reads version 1"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, CrashDuringSaveLeavesThePreviousCheckpointLoadable) {
  test::TempDir dir;
  ASSERT_EQ(test::run(train({"--epochs", "1", "--checkpoint-dir", dir / "ck"})).exit_code, 0);
  // What a crash mid-save leaves: a partial temporary file. It is never taken for a checkpoint.
  const std::string good = checkpoint_path(dir / "ck", 1);
  std::ofstream(checkpoint_path(dir / "ck", 2) + ".tmp-crash")
      << test::read_file(good).substr(0, 1000);
  EXPECT_EQ(latest_checkpoint(dir / "ck"), good);
  // A save that fails (the target's directory is a file) throws and leaves the old file alone.
  models::Net net;
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  EXPECT_THROW(save_checkpoint(good + "/x.pt", *net, sgd, {}), IoError);
  EXPECT_NO_THROW(load_checkpoint(good, *net, &sgd));
  const auto r =
      test::run(train({"--epochs", "2", "--checkpoint-dir", dir / "ck", "--resume", "auto"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("after epoch 1"), std::string::npos) << r.output;
}

TEST_F(CheckpointTest, FullDiskFailsTheSaveCleanlyAndKeepsThePreviousCheckpoint) {
  test::TempDir dir;
  make_directories(dir / "small");
  // A 2 MiB file system: one checkpoint (~1.3 MB: weights and momentum) fits, a second does not.
  if (test::run({"/bin/mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", dir / "small"}).exit_code !=
      0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  }
  const auto r = test::run(train({"--epochs", "3", "--checkpoint-dir", dir / "small"}));
  const auto ls = test::run({"/bin/ls", "-A", dir / "small"});
  const auto eval = test::run({test::train_bin(), "evaluate", "--checkpoint",
                               checkpoint_path(dir / "small", 1), "--data-dir", data_->path()});
  test::run({"/bin/umount", dir / "small"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the previous file, if any, is untouched"), std::string::npos)
      << r.output;
  EXPECT_EQ(ls.output, "checkpoint-epoch-0001.pt\n");  // no partial file left behind
  EXPECT_EQ(eval.exit_code, 0) << eval.output;
}

TEST_F(CheckpointTest, LoadingACheckpointNeverRunsCode) {
  test::TempDir dir;
  const std::string marker = dir / "code-ran";
  const auto py = test::run_python("malicious_checkpoint.py", {dir / "evil.pt", marker});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  ASSERT_FALSE(path_exists(marker));
  const auto resume = test::run(train({"--epochs", "1", "--resume", dir / "evil.pt"}));
  const auto init = test::run(train({"--epochs", "1", "--init-from", dir / "evil.pt"}));
  EXPECT_EQ(resume.exit_code, 1) << resume.output;
  EXPECT_EQ(init.exit_code, 1) << init.output;
  EXPECT_NE(resume.output.find("evil.pt: not a readable checkpoint"), std::string::npos)
      << resume.output;
  EXPECT_FALSE(path_exists(marker)) << "loading the file ran its code";
}

TEST_F(CheckpointTest, KeepPrunesOldCheckpoints) {
  test::TempDir dir;
  ASSERT_EQ(
      test::run(train({"--epochs", "4", "--checkpoint-dir", dir / "ck", "--keep", "2"})).exit_code,
      0);
  EXPECT_FALSE(path_exists(checkpoint_path(dir / "ck", 2)));
  EXPECT_TRUE(path_exists(checkpoint_path(dir / "ck", 3)));
  EXPECT_TRUE(path_exists(checkpoint_path(dir / "ck", 4)));
}

// The framing check that keeps forged lengths away from LibTorch's unpickler (which would
// reserve them): fuzz/checkpoint-corpus holds the files that made it allocate 4 GB.
TEST(PickleGuard, AcceptsWellFramedPicklesAndNamesForgedLengths) {
  using namespace std::string_literals;
  // (Split literals where a hex escape is followed by a letter that is a hex digit.)
  EXPECT_EQ(pickle_framing_problem("\x80\x02}q\x00X\x01\x00\x00\x00"
                                   "aK\x01s."s),
            "");
  EXPECT_EQ(pickle_framing_problem("\x80\x02"
                                   "ccollections\nOrderedDict\nq\x00)R."s),
            "");
  EXPECT_EQ(pickle_framing_problem("\x80\x02X\xfc\xff\xff\xff"
                                   "ab."s),
            "a length of 4294967292 at byte 2 runs past the end (10 bytes)");
  EXPECT_EQ(pickle_framing_problem("\x80\x02}r\x00\x00\x00\x45."s),
            "a memo id of 1157627904 at byte 3 is beyond the pickle's 9 bytes");
  EXPECT_EQ(pickle_framing_problem("\x80\x02}r\x00\x00\x00\x00."s), "");
  EXPECT_EQ(pickle_framing_problem("\x80\x02\xff."s),
            "opcode 0xff at byte 2 is not a pickle opcode");
  EXPECT_EQ(pickle_framing_problem("\x80\x02}"s), "no STOP");
  EXPECT_EQ(pickle_framing_problem("\x80\x02"
                                   "cos\nsys"s),
            "unterminated line at byte 2");
}

}  // namespace
}  // namespace ddp

// LibTorch 1.13 sizes a storage by the pickle's element count, not by its record: this file
// (found by fuzz/checkpoint_fuzz.cpp) made copy_ read the null page through an empty record.
TEST(CheckpointForgery, AStorageLargerThanItsRecordIsRefused) {
  const std::string path =
      std::string(DDP_SOURCE_DIR) + "/fuzz/checkpoint-corpus/regression-storage-beyond-record";
  try {
    ddp::read_state_dict(path);
    FAIL() << "loaded a forged file";
  } catch (const ddp::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bytes but its record in the archive holds"),
              std::string::npos)
        << e.what();
  }
}

// CreatedFileGuard (atomic_file.h): unwinding removes a file that its opening created and that
// holds nothing yet; a file that existed, or that was written, or a normal end, keeps the file.
TEST(CreatedFileGuard, AnExceptionRemovesOnlyAFileItsOwnerCreatedAndNeverWrote) {
  const ddp::test::TempDir dir;
  const std::string fresh = dir / "fresh", old = dir / "old", used = dir / "used";
  std::ofstream(old) << "kept";
  auto open_then_fail = [](const std::string& path, bool write) {
    try {
      ddp::CreatedFileGuard guard(path);
      std::ofstream(path, std::ios::app) << (write ? "output" : "");
      if (write) guard.wrote();
      throw std::runtime_error("start-up failed");
    } catch (const std::runtime_error&) {
    }
  };
  open_then_fail(fresh, false);
  EXPECT_FALSE(std::filesystem::exists(fresh));
  open_then_fail(old, false);
  EXPECT_EQ(ddp::test::read_file(old), "kept");
  open_then_fail(used, true);
  EXPECT_EQ(ddp::test::read_file(used), "output");
  {
    ddp::CreatedFileGuard guard(fresh);
    EXPECT_FALSE(guard.existed());
    std::ofstream(fresh, std::ios::app);
  }
  EXPECT_TRUE(std::filesystem::exists(fresh));
  std::filesystem::remove(fresh);
  try {  // a guard moved away from removes nothing; the one it moved to still does
    ddp::CreatedFileGuard first(fresh);
    std::ofstream(fresh, std::ios::app);
    ddp::CreatedFileGuard second(std::move(first));
    throw std::runtime_error("start-up failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(std::filesystem::exists(fresh));
  static_assert(std::is_move_constructible_v<ddp::MetricsWriter>);
  static_assert(std::is_move_assignable_v<ddp::MetricsWriter>);
}
