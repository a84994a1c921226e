// The test-set evaluation after each epoch and of `ddp-train evaluate`: every rank evaluates a
// contiguous, disjoint slice and the sums are all-reduced, so the result covers every test image
// exactly once, whatever the world size.
#pragma once

#include <cstdint>
#include <vector>

#include "train/training_setup.h"

namespace ddp::train {

struct Evaluation {
  double loss = 0;
  double accuracy = 0;                 // fraction in [0, 1]
  int64_t total = 0;                   // test images evaluated, over all ranks
  std::vector<double> class_accuracy;  // by label
};

/// Evaluates the set-up's model on its test set (a collective: every rank calls it).
Evaluation evaluate(const TrainingSetup& setup);

}  // namespace ddp::train
