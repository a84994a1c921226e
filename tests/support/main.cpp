// The test binaries' main: one intra-op thread, so threads-as-ranks tests don't oversubscribe.
#include <gtest/gtest.h>
#include <torch/torch.h>

int main(int argc, char** argv) {
  at::set_num_threads(1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
