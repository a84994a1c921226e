// The data a run trains and evaluates on, whichever --dataset it is: a sample source for each
// split (an in-memory set through its transforms, or an image folder through
// torchvision's pipelines), the shape the model takes, the class names, and the loader's
// settings (--batch-size, --loader-threads, --on-bad-sample, pinned memory on a GPU).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "ddp/data/dataset.h"
#include "ddp/data/image_pipeline.h"
#include "ddp/data/loader.h"
#include "ddp/data/sample_source.h"
#include "options.h"

namespace ddp::train {

struct TrainingData {
  std::shared_ptr<const data::SampleSource> train, test;  // test: the evaluation pipeline
  std::string train_description, test_description;
  data::ImageShape input;  // what the model takes
  int64_t num_classes = 0;
  std::vector<std::string> class_names;
};

/// Opens both splits of --dataset from `dir` (DIR/train and DIR/val for an image folder). Throws
/// ddp::Error naming the file or the folder.
TrainingData open_training_data(const TrainOptions& options, const std::string& dir);

/// An image folder's training or evaluation pipeline as the flags set it (--image-size,
/// --hflip, --normalize, --seed).
data::ImagePipelineOptions image_pipeline_options(const TrainOptions& options,
                                                  data::ImagePipelineOptions::Kind kind);

/// Loader threads per rank: --loader-threads, else a default that leaves the compute its CPUs;
/// `reason` says which.
int choose_loader_threads(const TrainOptions& options, int local_world_size, bool gpu,
                          std::string& reason);

/// The training loader's settings; evaluation's are the same with larger batches.
data::LoaderOptions loader_options(const TrainOptions& options, int loader_threads,
                                   torch::Device device);

}  // namespace ddp::train
