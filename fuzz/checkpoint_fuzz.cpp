// libFuzzer target for the checkpoint loader: the input becomes a file that is loaded as a
// ddp.cpp checkpoint (into a small model and its SGD state) and as a state dict (ours or Python's
// torch.save). Every outcome must be a clean error (ddp::Error, or c10::Error from LibTorch's
// own checks) or a loaded file: no crash, no hang, no allocation a forged header asks for.
// With DDP_FUZZ_SEED_DIR set, it first writes a real checkpoint and an export there as seeds.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include <torch/torch.h>

#include "app_environment.h"
#include "ddp/checkpoint/checkpoint.h"
#include "ddp/error.h"

namespace {

struct Target {
  torch::nn::Linear model{torch::nn::LinearOptions(3, 2)};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  std::string path;

  Target() {
    char tmpl[] = "/tmp/ddp-fuzz-checkpoint-XXXXXX";
    path = std::string(::mkdtemp(tmpl)) + "/input.pt";
  }
};

Target& target() {
  static Target t;
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::manual_seed(0);  // the same seeds on every run, for scripts/fuzz.sh's fixed -seed
  if (const char* dir = std::getenv(ddp::env::kFuzzSeedDir)) {
    Target& t = target();
    t.model->forward(torch::ones({1, 3})).sum().backward();
    t.optimizer.step();  // so that the checkpoint holds momentum buffers
    ddp::CheckpointState state;
    state.epoch = 1;
    state.config = "seed";
    ddp::save_checkpoint(std::string(dir) + "/seed-checkpoint.pt", *t.model, t.optimizer, state);
    ddp::export_state_dict(std::string(dir) + "/seed-export.pt", *t.model);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Target& t = target();
  {
    std::ofstream out(t.path, std::ios::binary | std::ios::trunc);  // no fsync: speed
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    ddp::load_checkpoint(t.path, *t.model, &t.optimizer);
  } catch (const ddp::Error&) {
  } catch (const c10::Error&) {
  }
  try {
    ddp::read_state_dict(t.path);
  } catch (const ddp::Error&) {
  } catch (const c10::Error&) {
  }
  return 0;
}
