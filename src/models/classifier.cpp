#include "ddp/models/classifier.h"

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "ddp/models/net.h"
#include "ddp/models/resnet.h"
#include "ddp/models/torchvision_resnet.h"

namespace ddp::models {

std::shared_ptr<ClassifierImpl> make_classifier(const std::string& name, int64_t channels,
                                                int64_t side, int64_t num_classes) {
  if (name == "net") {
    if (side % 4 != 0) {
      throw InvalidArgument(c10::str("model net: images are ", side, "x", side,
                                     "; the net model needs a side divisible by 4"));
    }
    return Net(channels, side, num_classes).ptr();
  }
  if (name == "resnet") {
    if (side < 8) {
      throw InvalidArgument(c10::str("model resnet: images are ", side, "x", side,
                                     "; the resnet model needs a side of at least 8"));
    }
    return ResNet(channels, num_classes).ptr();
  }
  if (name == "resnet18" || name == "resnet50") {
    if (side < 32) {
      throw InvalidArgument(c10::str("model ", name, ": images are ", side, "x", side,
                                     "; torchvision's ResNets need a side of at least 32"));
    }
    return TorchvisionResNet(name == "resnet18" ? 18 : 50, num_classes, channels).ptr();
  }
  throw InvalidArgument(
      c10::str("unknown model '", name, "'; use net, resnet, resnet18 or resnet50"));
}

}  // namespace ddp::models
