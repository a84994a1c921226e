// The test binaries' main: one intra-op thread, so threads-as-ranks tests don't oversubscribe.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdlib>

int main(int argc, char** argv) {
#if TORCH_VERSION_MAJOR >= 2
  // Workaround, LibTorch 2.6.0 with Debian 13's oneDNN 3.6: threads that run convolutions of the
  // same shape at the same moment (threads as ranks, lined up by DDP's broadcast) apparently share
  // the primitive oneDNN cached for that shape, and its backward sometimes crashed inside libdnnl
  // (address nil) or returned a wrong weight gradient: CommHook's fp16 test crashed within 5-30
  // runs, DistributedDataParallel.AllReduceStartsBeforeBackwardEnds within ~12. With oneDNN's
  // primitive cache off, each thread builds its own: 65 runs of each, no crash. Before any
  // oneDNN call; the environment wins if it sets the capacity.
  setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "0", 0);
#endif
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
