// A fresh models::Net(1, 16, 10) with the weights of another: the tests' way to give several
// models (sharded and plain, every rank's) the same start.
#pragma once

#include <torch/torch.h>

#include "ddp/models/net.h"

namespace ddp::test {

inline models::Net copy_of(const models::Net& source) {
  models::Net net(1, 16, 10);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < net->parameters().size(); ++i) {
    net->parameters()[i].copy_(source->parameters()[i]);
  }
  return net;
}

}  // namespace ddp::test
