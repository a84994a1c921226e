// ImageFolder and its pipelines against torchvision (.venv): the same classes and samples in the
// same order, evaluation pixels equal to torchvision's, training crops equal to
// F.resized_crop's for the same box; bad files named, refused or skipped; batches the same on
// any number of loader threads.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "ddp/checkpoint/checkpoint.h"
#include "ddp/data/image.h"
#include "ddp/data/image_folder.h"
#include "ddp/data/image_pipeline.h"
#include "ddp/data/loader.h"
#include "ddp/error.h"
#include "support/parts.h"
#include "support/process.h"

namespace ddp::data {
namespace {

using Kind = ImagePipelineOptions::Kind;

// A test ImageFolder written by tools/make_imagefolder.py --cases (with `bad` files).
std::string make_folder(const test::TempDir& dir, const std::vector<std::string>& bad = {}) {
  std::vector<std::string> args = {dir / "images", "--cases"};
  for (const std::string& kind : bad) args.insert(args.end(), {"--bad", kind});
  const auto r = test::run_tool("make_imagefolder.py", args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return dir / "images";
}

nlohmann::json golden_listing(const std::string& root) {
  const auto r = test::run_python("imagefolder_golden.py", {"--dir", root});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output.substr(r.output.find('{')));
}

std::shared_ptr<ImageFolderSource> source(const std::string& root, Kind kind, int size = 224) {
  ImagePipelineOptions o;
  o.kind(kind).size(size).resize(size * 256 / 224).scaled_decode(false).seed(5);
  return std::make_shared<ImageFolderSource>(std::make_shared<ImageFolder>(root), o);
}

// The largest |difference| in pixel steps (1/255 before normalisation) between two batches.
double max_pixel_steps(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor std = torch::tensor(kImageNetStd).view({1, 3, 1, 1});
  return ((a - b) * std * 255).abs().max().item<double>();
}

#define SKIP_WITHOUT_DECODERS()                                                                  \
  do {                                                                                           \
    if (!test::parts::kJpeg || !test::parts::kPng) GTEST_SKIP() << "built without JPEG and PNG"; \
  } while (0)

TEST(ImageFolder, ListsWhatTorchvisionListsInItsOrder) {
  test::TempDir dir;
  const std::string root = make_folder(dir);
  const nlohmann::json golden = golden_listing(root);
  const ImageFolder folder(root);
  EXPECT_EQ(folder.classes(), golden["classes"].get<std::vector<std::string>>());
  ASSERT_EQ(folder.size(), golden["samples"].size());
  for (size_t i = 0; i < folder.size(); ++i) {
    EXPECT_EQ(folder.path(i), golden["samples"][i][0].get<std::string>()) << i;
    EXPECT_EQ(folder.label(int(i)), golden["samples"][i][1].get<int>()) << i;
  }
  EXPECT_LT(folder.index_bytes(), folder.size() * 64);
  // A trailing slash changes nothing.
  EXPECT_EQ(ImageFolder(root + "/").path(3), folder.path(3));
}

TEST(ImageFolder, RefusesWhatItCannotUseWhileIndexing) {
  test::TempDir dir;
  const std::string root = make_folder(dir, {"unsupported-bmp"});
  try {
    ImageFolder folder(root);
    FAIL() << "a BMP file was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad_format.bmp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("convert"), std::string::npos) << e.what();
  }
  test::TempDir empty;
  const std::string with_empty = make_folder(empty, {"empty-class"});
  try {
    ImageFolder folder(with_empty);
    FAIL() << "an empty class was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("no image in the class folder(s) empty"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(ImageFolder(dir / "missing"), IoError);
  std::filesystem::create_directories(dir / "flat");
  std::ofstream(dir / "flat/x.jpg") << "x";
  EXPECT_THROW(ImageFolder(dir / "flat"), DataError);  // no class folder
}

TEST(ImageFolderSource, EvaluationPixelsAreTorchvisions) {
  SKIP_WITHOUT_DECODERS();
  test::TempDir dir;
  const std::string root = make_folder(dir);
  const auto py =
      test::run_python("imagefolder_golden.py", {"--dir", root, "--transform", "eval", "--resize",
                                                 "73", "--size", "64", "--out", dir / "eval.pt"});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const auto golden = read_state_dict(dir / "eval.pt");
  const auto eval = source(root, Kind::kEval, 64);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < int64_t(eval->size()); ++i) all.push_back(i);
  Loader loader(eval, LoaderOptions().batch_size(int64_t(all.size())).threads(2));
  const Batch batch = loader.make_batch(all, 0, 0);
  EXPECT_TRUE(torch::equal(batch.labels, golden.at("labels")));
  for (int64_t i = 0; i < batch.images.size(0); ++i) {
    EXPECT_LE(max_pixel_steps(batch.images[i].unsqueeze(0), golden.at("images")[i].unsqueeze(0)),
              1.01)
        << eval->folder().path(size_t(i));
  }
  // Most are bit for bit (libjpeg-turbo's and Pillow's resampling agree exactly).
  EXPECT_LE(max_pixel_steps(batch.images, golden.at("images")), 1.01);
}

TEST(ImageFolderSource, TrainingCropsAreTorchvisionsResizedCropOfTheSameBox) {
  SKIP_WITHOUT_DECODERS();
  test::TempDir dir;
  const std::string root = make_folder(dir);
  const auto train = source(root, Kind::kTrain, 48);
  nlohmann::json boxes = nlohmann::json::array();
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < int64_t(train->size()); ++i) {
    // The pipeline's own draws, replayed: the image's size, then the box, then the flip.
    std::ifstream in(train->folder().path(size_t(i)), std::ios::binary);
    const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
    const ImageInfo info = read_image_info(bytes.data(), bytes.size(), "test");
    CounterRng rng(5, 3, uint64_t(i));
    const CropBox b = random_resized_crop_box(info.width, info.height, {}, rng);
    const bool flip = rng.uniform(0, 1) < 0.5;
    boxes.push_back({i, b.top, b.left, b.height, b.width, flip});
    indices.push_back(i);
  }
  std::ofstream(dir / "boxes.json") << boxes.dump();
  const auto py = test::run_python("imagefolder_golden.py",
                                   {"--dir", root, "--transform", "crop", "--size", "48", "--boxes",
                                    dir / "boxes.json", "--out", dir / "crop.pt"});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  const auto golden = read_state_dict(dir / "crop.pt");
  Loader loader(train, LoaderOptions().batch_size(int64_t(indices.size())));
  const Batch batch = loader.make_batch(indices, /*epoch=*/3, 0);
  EXPECT_LE(max_pixel_steps(batch.images, golden.at("images")), 1.01);
}

TEST(ImageFolderSource, ScaledDecodingStaysCloseToTheFullDecode) {
  SKIP_WITHOUT_DECODERS();
  test::TempDir dir;
  const std::string root = make_folder(dir);
  ImagePipelineOptions o;
  o.kind(Kind::kTrain).size(32).crop({0.9, 1.0}).seed(1);
  auto folder = std::make_shared<ImageFolder>(root);
  const ImageFolderSource full(folder, ImagePipelineOptions(o).scaled_decode(false));
  const ImageFolderSource scaled(folder, ImagePipelineOptions(o).scaled_decode(true));
  int compared = 0;
  for (size_t i = 0; i < folder->size(); ++i) {
    if (folder->path(i).find("600x400") == std::string::npos) continue;  // crops of 4x+ size 32
    const torch::Tensor a = full.get({int64_t(i), 0, 0, 0}).data;
    const torch::Tensor b = scaled.get({int64_t(i), 0, 0, 0}).data;
    EXPECT_FALSE(torch::equal(a, b)) << "not decoded at a smaller scale: " << folder->path(i);
    const double mean_steps = ((a - b) * 0.226 * 255).abs().mean().item<double>();
    EXPECT_LT(mean_steps, 4) << folder->path(i);
    ++compared;
  }
  EXPECT_GT(compared, 0);
}

TEST(Loader, ImageBatchesAreTheSameOnAnyNumberOfThreads) {
  SKIP_WITHOUT_DECODERS();
  test::TempDir dir;
  const std::string root = make_folder(dir);
  const auto train = source(root, Kind::kTrain, 40);
  std::vector<int64_t> order;
  for (int64_t i = int64_t(train->size()) - 1; i >= 0; --i) order.push_back(i);
  auto batches = [&](int threads) {
    Loader loader(train, LoaderOptions().batch_size(7).threads(threads).prefetch(2));
    loader.start_epoch(order, 2);
    std::vector<torch::Tensor> images;
    while (auto b = loader.next()) images.push_back(b->images);
    return torch::cat(images);
  };
  const torch::Tensor one = batches(1);
  EXPECT_EQ(one.size(0), int64_t(order.size()));
  EXPECT_TRUE(torch::equal(one, batches(3)));
}

TEST(Loader, BadFilesStopWithTheirNameOrAreSkippedDeterministically) {
  SKIP_WITHOUT_DECODERS();
  test::TempDir dir;
  const std::string root = make_folder(
      dir, {"truncated-jpeg", "zero-byte", "text-as-jpg", "bomb", "dangling-symlink", "fifo"});
  const auto eval = source(root, Kind::kEval, 32);
  std::vector<int64_t> all;
  for (int64_t i = 0; i < int64_t(eval->size()); ++i) all.push_back(i);
  for (const char* name : {"bad_truncated.jpg", "bad_empty.jpg", "bad_text.jpg", "bad_bomb.png",
                           "bad_dangling.jpg", "bad_fifo.jpg"}) {
    int64_t index = -1;
    for (size_t i = 0; i < eval->size(); ++i) {
      if (eval->folder().path(i).find(name) != std::string::npos) index = int64_t(i);
    }
    ASSERT_GE(index, 0) << name;
    try {
      eval->get({index, 0, 0, 0});
      ADD_FAILURE() << name << " decoded";
    } catch (const Error& e) {
      EXPECT_TRUE(dynamic_cast<const DataError*>(&e) || dynamic_cast<const IoError*>(&e));
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      if (std::string(name) == "bad_fifo.jpg") {  // refused at once, not waited on
        EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
      }
    }
  }
  // Stopping: the batches before the first bad file's are handed out, then its batch throws.
  std::vector<int64_t> good_first;
  for (int64_t i : all) {
    if (eval->folder().path(size_t(i)).find("bad_") == std::string::npos) good_first.push_back(i);
  }
  const int64_t good_batches = int64_t(good_first.size()) / 8;
  for (int64_t i : all) {
    if (eval->folder().path(size_t(i)).find("bad_") != std::string::npos) good_first.push_back(i);
  }
  Loader stop(eval, LoaderOptions().batch_size(8).threads(2).prefetch(4));
  stop.start_epoch(good_first, 0);
  for (int64_t b = 0; b < good_batches; ++b) EXPECT_TRUE(stop.next().has_value()) << b;
  EXPECT_THROW(stop.next(), Error);
  auto skipped = [&](int threads) {
    Loader skip(eval,
                LoaderOptions().batch_size(8).threads(threads).on_bad_sample(OnBadSample::kSkip));
    skip.start_epoch(all, 0);
    std::vector<torch::Tensor> labels;
    int64_t rows = 0;
    while (auto b = skip.next()) {
      labels.push_back(b->labels);
      rows += b->labels.size(0);
    }
    EXPECT_EQ(rows, int64_t(all.size()));  // every step still taken
    EXPECT_GE(skip.bad_samples(), 6);
    return torch::cat(labels);
  };
  EXPECT_TRUE(torch::equal(skipped(1), skipped(3)));
}

}  // namespace
}  // namespace ddp::data
