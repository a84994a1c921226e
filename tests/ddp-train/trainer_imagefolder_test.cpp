// ddp-train on an image folder, end to end: two ranks train torchvision's ResNet-18 on JPEGs with
// the same weights, its export loads into torchvision, torchvision's weights start a run,
// preview draws the batch, and a bad file stops the run naming it, or is skipped and counted;
// README's own-images commands run as written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/parts.h"
#include "support/process.h"
#include "support/trainer_fixture.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

class ImageFolderTrainerTest : public ::testing::Test {
 protected:
  // 4 classes of 12 + 4 ImageNet-like JPEGs (tools/make_imagefolder.py). scikit-image, which
  // it cuts them from, is bench/requirements.txt's (setup.sh installs it into .venv): a Python
  // without it skips these tests, saying so.
  static void SetUpTestSuite() {
    data_ = new test::TempDir();
    const auto r = test::run_tool(
        "make_imagefolder.py",
        {data_->path() + "/images", "--classes", "4", "--train", "12", "--val", "4"}, 120s);
    made_ = r.exit_code == 0;
    if (!made_) why_not_ = r.output;
  }
  static void TearDownTestSuite() { delete data_; }
  void SetUp() override {
    if (!test::parts::kJpeg) GTEST_SKIP() << "built without JPEG decoding";
    if (!made_ && why_not_.find("scikit-image is missing") != std::string::npos) {
      GTEST_SKIP() << why_not_;
    }
    ASSERT_TRUE(made_) << why_not_;
  }
  static std::vector<std::string> train(const std::string& root,
                                        const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {test::train_bin(),
                                     "--dataset",
                                     "imagefolder",
                                     "--data-dir",
                                     root,
                                     "--model",
                                     "resnet18",
                                     "--image-size",
                                     "32",
                                     "--batch-size",
                                     "8",
                                     "--epochs",
                                     "1",
                                     "--normalize",
                                     "--hflip"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  static std::string images() { return data_->path() + "/images"; }
  static inline test::TempDir* data_ = nullptr;
  static inline bool made_ = false;
  static inline std::string why_not_;
};

TEST_F(ImageFolderTrainerTest, TwoRanksTrainResNet18AndTorchvisionLoadsTheExport) {
  test::TempDir dir;
  const auto r =
      test::run(train(images(), {"--nproc-per-node", "2", "--loader-threads", "2", "--export",
                                 dir / "r18.pt", "--metrics", dir / "m.jsonl"}),
                {}, 240s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::weight_fingerprints(r.output).size(), 1u) << r.output;
  EXPECT_NE(r.output.find("ImageFolder " + images() + "/train: 48 images of 4 classes"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(last_value(dir / "m.jsonl", "bad_samples"), 0);
  EXPECT_GE(last_value(dir / "m.jsonl", "data_wait_seconds"), 0);
  const auto check = test::run_python("torchvision_resnet.py",
                                      {"check", dir / "r18.pt", "18", "4", dir / "logits.pt"});
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

TEST_F(ImageFolderTrainerTest, TorchvisionWeightsStartARun) {
  test::TempDir dir;
  const auto save =
      test::run_python("torchvision_resnet.py", {"save", "2", "18", "4", dir / "tv.pt"});
  ASSERT_EQ(save.exit_code, 0) << save.output;
  const auto r =
      test::run(train(images(), {"--init-from", dir / "tv.pt", "--max-steps", "1"}), {}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("initial weights from"), std::string::npos) << r.output;
}

TEST_F(ImageFolderTrainerTest, PreviewDrawsTheBatchAndSavesItForTorchLoad) {
  test::TempDir dir;
  if (!test::parts::kCairo) GTEST_SKIP() << "built without cairo";
  const auto r = test::run({test::train_bin(), "preview", "--dataset", "imagefolder", "--data-dir",
                            images(), "--image-size", "64", "--batch-size", "6", "--split", "val",
                            "-o", dir / "grid.png", "--save-tensor", dir / "batch.pt"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(std::filesystem::file_size(dir / "grid.png"), 1000u);
  const auto py = test::run({DDP_PYTHON, "-c",
                             "import sys, torch; d = torch.load(sys.argv[1]); "
                             "assert d['images'].shape == (6, 3, 64, 64), d['images'].shape; "
                             "assert d['labels'].tolist() == [0] * 4 + [1] * 2, d['labels']; "
                             "assert d['indices'].tolist() == list(range(6)); print('ok')",
                             dir / "batch.pt"});
  EXPECT_EQ(py.exit_code, 0) << py.output;
  const auto bad = test::run({test::train_bin(), "preview", "--dataset", "imagefolder",
                              "--data-dir", images(), "-o", dir / "grid.jpg"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("must end in .png"), std::string::npos) << bad.output;
}

TEST_F(ImageFolderTrainerTest, ABadFileStopsTheRunNamingItOrIsSkippedAndCounted) {
  test::TempDir dir;
  std::filesystem::copy(images(), dir / "images", std::filesystem::copy_options::recursive);
  const std::string bad = dir / "images/train/n00000001/zz_truncated.JPEG";
  {
    const std::string good =
        test::read_file(dir / "images/train/n00000001/" +
                        std::filesystem::directory_iterator(dir / "images/train/n00000001")
                            ->path()
                            .filename()
                            .string());
    std::ofstream(bad, std::ios::binary) << good.substr(0, good.size() / 2);
  }
  const auto stop = test::run(train(dir / "images", {"--nproc-per-node", "2"}), {}, 120s);
  EXPECT_NE(stop.exit_code, 0);
  EXPECT_NE(stop.output.find("zz_truncated.JPEG"), std::string::npos) << stop.output;
  const auto skip = test::run(train(dir / "images", {"--nproc-per-node", "2", "--on-bad-sample",
                                                     "skip", "--metrics", dir / "m.jsonl"}),
                              {}, 240s);
  ASSERT_EQ(skip.exit_code, 0) << skip.output;
  EXPECT_EQ(test::weight_fingerprints(skip.output).size(), 1u) << skip.output;
  EXPECT_NE(skip.output.find("warning: skipping a bad sample"), std::string::npos);
  EXPECT_GE(last_value(dir / "m.jsonl", "bad_samples"), 1);
}

TEST_F(ImageFolderTrainerTest, BadFlagsAndFoldersAreNamed) {
  test::TempDir dir;
  auto error_of = [](const std::vector<std::string>& argv) {
    const auto r = test::run(argv);
    EXPECT_NE(r.exit_code, 0);
    return r.output;
  };
  EXPECT_NE(error_of({test::train_bin(), "--dataset", "imagefolder"}).find("needs --data-dir"),
            std::string::npos);
  EXPECT_NE(error_of(train(images(), {"--random-crop"})).find("RandomResizedCrop"),
            std::string::npos);
  EXPECT_NE(error_of(train(dir.path(), {})).find(dir / "train"), std::string::npos);
  EXPECT_NE(error_of(train(images(), {"--image-size", "8"})).find("--image-size"),
            std::string::npos);
}

// README's own-images quick start, word for word: the command in its text that writes a folder
// (`... tools/make_imagefolder.py DIR`), then its ```sh block (continued lines joined).
std::vector<std::vector<std::string>> readme_own_images_commands() {
  const std::string readme = test::read_file(test::source_dir() + "/README.md");
  const auto section = readme.find("Your own images");
  const auto folder = readme.find("tools/make_imagefolder.py DIR", section);
  const auto begin = folder == std::string::npos ? folder : readme.find("```sh\n", folder);
  const auto end = begin == std::string::npos ? begin : readme.find("```", begin + 6);
  if (section == std::string::npos || end == std::string::npos) return {};
  const auto tick = readme.rfind('`', folder);
  std::vector<std::vector<std::string>> commands;
  std::istringstream lines(readme.substr(tick + 1, readme.find('`', folder) - tick - 1) + "\n" +
                           readme.substr(begin + 6, end - begin - 6));
  bool continued = false;  // the line before ended in '\\': this one goes on its command
  for (std::string line; std::getline(lines, line);) {
    if (!continued || commands.empty()) commands.emplace_back();
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (word != "\\") commands.back().push_back(word);
    }
    continued = !line.empty() && line.back() == '\\';
    if (commands.back().empty()) commands.pop_back();  // a blank line
  }
  return commands;
}

// Runs them in a folder of their own (the reference Python for .venv's, this build's ddp-train,
// training cut to 2 steps); then resnet18.pt must load into torchvision's resnet18 as README
// says, with the folder's 10 classes (make_imagefolder.py's default).
TEST_F(ImageFolderTrainerTest, TheReadmesOwnImagesCommandsRunAsWritten) {
  if (!test::parts::kCairo) GTEST_SKIP() << "built without cairo (preview draws with it)";
  test::TempDir dir;
  const auto commands = readme_own_images_commands();
  ASSERT_EQ(commands.size(), 3u) << "README's own images are no longer folder, preview, training";
  for (auto argv : commands) {
    for (auto& word : argv) {
      if (word == ".venv/bin/python") word = DDP_PYTHON;
      if (word == "build/ddp-train") word = test::train_bin();
      if (word.rfind("tools/", 0) == 0) word = test::source_dir() + "/" + word;
      if (word == "DIR" || word == "batch.png" || word == "resnet18.pt") word = dir / word;
    }
    if (argv.size() > 1 && argv[1] != "preview" && argv[0] == test::train_bin()) {
      argv.insert(argv.end(), {"--epochs", "1", "--max-steps", "2"});
    }
    const auto r = test::run(argv, {}, 240s);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  EXPECT_GT(std::filesystem::file_size(dir / "batch.png"), 1000u);
  const auto check = test::run_python(
      "torchvision_resnet.py", {"check", dir / "resnet18.pt", "18", "10", dir / "logits.pt"});
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

}  // namespace
}  // namespace ddp
