#include "report/stragglers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

#include "ddp/error.h"

namespace ddp::train {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + long(mid), v.end());
  return v[mid];
}

std::string format(const char* spec, double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, spec, value);
  return buf;
}

}  // namespace

StragglerReport compare_ranks(const std::vector<std::vector<double>>& compute) {
  StragglerReport r;
  const size_t ranks = compute.size();
  std::vector<double> waited_for(ranks, 0.0);
  size_t common = SIZE_MAX;
  for (const auto& c : compute) common = std::min(common, c.size());
  r.steps = ranks == 0 ? 0 : int64_t(common);
  // In each step the slowest rank made every other one wait the difference.
  for (size_t s = 0; s < size_t(r.steps); ++s) {
    size_t slowest = 0;
    for (size_t k = 1; k < ranks; ++k)
      if (compute[k][s] > compute[slowest][s]) slowest = k;
    for (size_t k = 0; k < ranks; ++k) waited_for[slowest] += compute[slowest][s] - compute[k][s];
  }
  double fastest = INFINITY;
  for (const auto& c : compute) {
    double sum = 0;
    for (double x : c) sum += x;
    const double mean = c.empty() ? 0 : sum / double(c.size());
    r.compute_ms.push_back(1e3 * mean);
    const double mid = median(c);
    r.vs_median.push_back(mid > 0 ? mean / mid : 1.0);
    fastest = std::min(fastest, mean);
  }
  for (double ms : r.compute_ms) r.vs_fastest.push_back(fastest > 0 ? ms / (1e3 * fastest) : 1.0);
  if (ranks > 1) {
    r.waited_for = int(std::max_element(waited_for.begin(), waited_for.end()) - waited_for.begin());
    r.waited_seconds = waited_for[size_t(r.waited_for)];
  }
  return r;
}

StragglerReport StragglerWatch::end_epoch(ProcessGroup* group) {
  std::vector<std::vector<double>> all;
  if (group == nullptr || group->size() == 1) {
    all.push_back(compute_);
  } else {
    // Equal lengths for the all-gather: padded with NaN, which marks a step a rank did not take.
    torch::Tensor count = torch::tensor({int64_t(compute_.size())});
    group->allreduce_max(count).wait();
    torch::Tensor mine = torch::full({count.item<int64_t>()}, NAN, torch::kFloat64);
    for (size_t s = 0; s < compute_.size(); ++s) mine[int64_t(s)] = compute_[s];
    for (const torch::Tensor& theirs : group->allgather(mine)) {
      std::vector<double> steps;
      const auto values = theirs.accessor<double, 1>();
      for (int64_t s = 0; s < values.size(0) && !std::isnan(values[s]); ++s)
        steps.push_back(values[s]);
      all.push_back(std::move(steps));
    }
  }
  compute_.clear();
  return compare_ranks(all);
}

std::string StragglerReport::line() const {
  std::string text = "stragglers: ";
  if (waited_for >= 0) {
    text += c10::str(
        "rank ", waited_for, " kept the others waiting ", format("%.2f", waited_seconds), " s (",
        format("%.1f", steps > 0 ? 1e3 * waited_seconds / double(steps) : 0.0), " ms a step); ");
  }
  text += "compute per step:";
  for (size_t k = 0; k < compute_ms.size(); ++k) {
    text += c10::str(k ? ", rank " : " rank ", k, " ", format("%.1f", compute_ms[k]), " ms (",
                     format("%.2f", vs_fastest[k]), k ? "x, " : "x the fastest, ",
                     format("%.2f", vs_median[k]), k ? "x)" : "x its median)");
  }
  return text;
}

void StragglerReport::add_to(JsonRecord& record) const {
  record.add("straggler_rank", waited_for).add("straggler_wait_seconds", waited_seconds);
  for (size_t k = 0; k < compute_ms.size(); ++k) {
    record.add(c10::str("rank", k, "_compute_ms"), compute_ms[k])
        .add(c10::str("rank", k, "_vs_fastest"), vs_fastest[k])
        .add(c10::str("rank", k, "_vs_median"), vs_median[k]);
  }
}

}  // namespace ddp::train
