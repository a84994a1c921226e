#include "train/training_data.h"

#include <algorithm>
#include <cmath>

#include <c10/util/StringUtil.h>

#include "ddp/data/image_folder.h"
#include "ddp/elastic/cpu_binding.h"
#include "ddp/error.h"
#include "flag_hint.h"

namespace ddp::train {
namespace {

// The label names of the built-in data sets, for the per-class accuracy.
std::vector<std::string> builtin_class_names(data::DatasetKind kind) {
  switch (kind) {
    case data::DatasetKind::kCifar10:
      return {"airplane", "automobile", "bird",  "cat",  "deer",
              "dog",      "frog",       "horse", "ship", "truck"};
    case data::DatasetKind::kFashionMnist:
      return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
    case data::DatasetKind::kMnist:
    case data::DatasetKind::kImageFolder:
    case data::DatasetKind::kTokens:
      break;
  }
  return {"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"};
}

data::TransformOptions memory_transforms(const TrainOptions& o, bool train) {
  data::TransformOptions t;
  t.normalize(o.normalize);
  if (o.normalize) data::default_normalization(o.dataset, t.mean(), t.std());
  t.crop_padding(train && o.random_crop ? 4 : 0);
  t.horizontal_flip(train && o.horizontal_flip);
  t.seed(o.seed);
  return t;
}

TrainingData open_memory_sets(const TrainOptions& o, const std::string& dir) {
  std::shared_ptr<const data::Dataset> train, test;
  with_flag_hint("--data-dir DIR, --download, or a synthetic set from `ddp-train make-data`", [&] {
    train = data::open_dataset(o.dataset, dir, data::Split::kTrain);
    test = data::open_dataset(o.dataset, dir, data::Split::kTest);
  });
  const data::ImageShape shape = train->shape();
  if (shape.height != shape.width) {
    throw DataError(c10::str(train->description(), ": images are ", shape.height, "x", shape.width,
                             "; the models need square images"));
  }
  TrainingData d;
  d.train_description = train->description();
  d.test_description = test->description();
  d.input = shape;
  d.num_classes = train->num_classes();
  d.class_names = builtin_class_names(o.dataset);
  d.train = std::make_shared<data::DatasetSource>(train, memory_transforms(o, true));
  d.test = std::make_shared<data::DatasetSource>(test, memory_transforms(o, false));
  return d;
}

// DIR/train and DIR/val, as ImageNet's layout; both must have the same classes, or a label
// would mean one class in training and another in evaluation.
TrainingData open_image_folders(const TrainOptions& o, const std::string& dir) {
  std::shared_ptr<const data::ImageFolder> train, val;
  with_flag_hint("--data-dir DIR (with DIR/train/<class>/* and DIR/val/<class>/*)", [&] {
    train = std::make_shared<data::ImageFolder>(dir + "/train");
    val = std::make_shared<data::ImageFolder>(dir + "/val");
  });
  if (train->classes() != val->classes()) {
    throw DataError(c10::str(dir, ": train/ has ", train->classes().size(), " classes and val/ ",
                             val->classes().size(),
                             ", or they are named differently: both need the same class folders"));
  }
  using Kind = data::ImagePipelineOptions::Kind;
  TrainingData d;
  d.train_description = train->description();
  d.test_description = val->description();
  d.input = {3, o.image_size, o.image_size};
  d.num_classes = int64_t(train->classes().size());
  d.class_names = train->classes();
  d.train =
      std::make_shared<data::ImageFolderSource>(train, image_pipeline_options(o, Kind::kTrain));
  d.test = std::make_shared<data::ImageFolderSource>(val, image_pipeline_options(o, Kind::kEval));
  return d;
}

}  // namespace

TrainingData open_training_data(const TrainOptions& o, const std::string& dir) {
  return o.dataset == data::DatasetKind::kImageFolder ? open_image_folders(o, dir)
                                                      : open_memory_sets(o, dir);
}

data::ImagePipelineOptions image_pipeline_options(const TrainOptions& o,
                                                  data::ImagePipelineOptions::Kind kind) {
  data::ImagePipelineOptions p;
  p.kind(kind);
  p.size(o.image_size);
  // torchvision's ImageNet recipe: Resize(256) before CenterCrop(224), in proportion.
  p.resize(int(std::lround(o.image_size * 256.0 / 224.0)));
  p.horizontal_flip(o.horizontal_flip);
  p.scaled_decode(!o.full_decode);
  p.normalize(o.normalize);
  p.seed(o.seed);
  return p;
}

int choose_loader_threads(const TrainOptions& o, int local_world_size, bool gpu,
                          std::string& reason) {
  if (o.loader_threads > 0) {
    reason = "--loader-threads";
    return o.loader_threads;
  }
  if (o.dataset != data::DatasetKind::kImageFolder) {
    reason = "an in-memory set needs no more";
    return 1;
  }
  // The CPUs this process may use; under --cpu-bind cores they are this rank's share already.
  const int cpus = int(std::max<size_t>(1, allowed_cpus().size()));
  const bool bound = launched_with_cpu_binding();
  const int per_rank = bound ? cpus : std::max(1, cpus / std::max(1, local_world_size));
  if (gpu) {  // the GPU computes: all of this rank's CPUs but the one that drives it decode
    reason = bound ? c10::str("its ", cpus, " CPU(s), less one for the GPU")
                   : c10::str(cpus, " cores / ", local_world_size,
                              " local workers, less one for the GPU");
    return std::max(1, per_rank - 1);
  }
  // On the CPU the model's threads use every core: one decoder per rank shares them, as decoding
  // takes a small fraction of a step's work.
  reason = "the model's threads use the cores";
  return 1;
}

data::LoaderOptions loader_options(const TrainOptions& o, int loader_threads,
                                   torch::Device device) {
  data::LoaderOptions l;
  l.batch_size(o.batch_size);
  l.channels_last(o.channels_last);
  l.threads(loader_threads);
  // The memory bound: at most `prefetch` batches exist at once (an image folder's 64 images of
  // 224x224 are 38.5 MB a batch). Their samples are made in parallel, so a few batches ahead
  // keep every thread busy; the small in-memory sets keep 8.
  l.prefetch(o.dataset == data::DatasetKind::kImageFolder ? 4 : 8);
  l.pin_memory(device.is_cuda());
  l.on_bad_sample(o.on_bad_sample);
  l.seed(o.seed);
  return l;
}

}  // namespace ddp::train
