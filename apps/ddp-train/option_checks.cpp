#include "option_checks.h"

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "lm/lm_options.h"

namespace ddp::train {

void check_combinations(const TrainOptions& options) {
  if (options.resume == "auto" && options.checkpoint_dir.empty()) {
    throw InvalidArgument("--resume auto needs --checkpoint-dir (where to look for checkpoints)");
  }
  if (!options.resume.empty() && !options.init_from.empty()) {
    throw InvalidArgument(
        "--resume and --init-from exclude each other: a checkpoint already holds the weights");
  }
  const LaunchOptions& l = options.launcher;
  const bool launcher_flags = l.nnodes() != 1 || l.rdzv_backend() != "static" ||
                              !l.rdzv_endpoint().empty() || l.max_restarts() > 0 ||
                              l.on_failure() != "restart";
  if (launcher_flags && options.nproc_per_node == 0) {
    throw InvalidArgument(
        "--nnodes, --rdzv-backend, --rdzv-endpoint, --max-restarts and --on-failure are the "
        "launcher's: add --nproc-per-node N (workers on this node), or give them to ddprun");
  }
  if (l.on_failure() == "continue") check_fault_tolerance_options(options);
  if (options.precision == Precision::kFp16 && options.zero) {
    throw InvalidArgument(
        "--precision fp16 cannot be combined with --zero yet: its loss scaler steps an optimizer "
        "over all the parameters (use bf16, which needs no loss scaling, with --zero)");
  }
  if (options.checkpoint_every_steps > 0 && options.checkpoint_dir.empty()) {
    throw InvalidArgument("--checkpoint-every-steps needs --checkpoint-dir (where to write them)");
  }
  if (!options.download_md5.empty() && options.download_url.empty()) {
    throw InvalidArgument("--download-md5 only applies together with --download-url");
  }
  const bool folder = options.dataset == data::DatasetKind::kImageFolder;
  if (folder && options.random_crop) {
    throw InvalidArgument(
        "--random-crop pads and crops the in-memory sets; --dataset imagefolder always takes "
        "torchvision's RandomResizedCrop (leave out --random-crop)");
  }
  if (!folder && (options.image_size != 224 || options.full_decode)) {
    throw InvalidArgument(c10::str(options.image_size != 224 ? "--image-size" : "--full-decode",
                                   " applies to --dataset imagefolder (the in-memory sets have "
                                   "their own image size)"));
  }
  if (options.local_batchnorm && options.model == ModelKind::kNet) {
    throw InvalidArgument("--local-batchnorm: --model net has no batch norm");
  }
  if (folder && options.data_dir.empty()) {
    throw InvalidArgument(
        "--dataset imagefolder needs --data-dir DIR, with DIR/train/<class>/* and "
        "DIR/val/<class>/* (ImageNet's layout)");
  }
  check_language_model_options(options);
}

}  // namespace ddp::train
