// An image classifier, (N, C, H, W) images to (N, classes) logits, and the models by name.
#pragma once

#include <memory>
#include <string>

#include <torch/torch.h>

namespace ddp::models {

class ClassifierImpl : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor images) = 0;
  /// What computes the layers that have a choice of kernels on this CPU, for a report, e.g.
  /// "conv1: oneDNN jit:avx2 direct; ..."; empty for a model of LibTorch's ops alone.
  virtual std::string kernels() const { return ""; }
};

/// The model called `name` ("net", "resnet" (CIFAR), "resnet18" or "resnet50" (torchvision's)) for
/// `channels` x `side` x `side` images; throws InvalidArgument for another name or an image size
/// the model cannot take.
std::shared_ptr<ClassifierImpl> make_classifier(const std::string& name, int64_t channels,
                                                int64_t side, int64_t num_classes);

}  // namespace ddp::models
