// ddp-train's views of where the time goes, as real processes: the --trace timeline (valid
// Chrome JSON, every rank a process, nested spans, each bucket's all-reduce on its own track and
// overlapping backward), its plot, and the straggler report naming a slowed rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>

#include "ddp/error.h"
#include "support/parts.h"
#include "support/process.h"
#include "support/trainer_fixture.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

struct Span {
  std::string name;
  int64_t begin, end, step;
};

// The complete ("X") events of one rank and track, by start time (longer first on a tie).
std::vector<Span> spans(const json& events, int pid, int tid) {
  std::vector<Span> out;
  for (const json& e : events) {
    if (e["ph"] != "X" || e["pid"] != pid || e["tid"] != tid) continue;
    const int64_t ts = e["ts"], dur = e["dur"];
    out.push_back({e["name"], ts, ts + dur, e["args"].value("step", int64_t(-1))});
  }
  std::sort(out.begin(), out.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  return out;
}

TEST_F(TrainerTest, TraceHasEveryRankWithNestedSpansAndAllReducesOverlappingBackward) {
  const test::TempDir out;
  // Small buckets: several all-reduces a step, the first launched while backward goes on.
  const auto r =
      test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1", "--max-steps",
                 "6", "--nproc-per-node", "2", "--bucket-cap-mb", "0.1", "--first-bucket-cap-mb",
                 "0.05", "--checkpoint-dir", out / "ck", "--trace", out / "t.json"},
                {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json trace = json::parse(test::read_file(out / "t.json"));  // throws if not JSON
  const json& events = trace.at("traceEvents");
  std::set<std::string> tracks;
  for (const json& e : events) {
    if (e["ph"] == "M" && e["name"] == "thread_name")
      tracks.insert(c10::str(e["pid"].get<int>(), ":", e["args"]["name"].get<std::string>()));
  }
  for (int rank : {0, 1}) {
    EXPECT_TRUE(tracks.count(c10::str(rank, ":training"))) << rank;
    EXPECT_TRUE(tracks.count(c10::str(rank, ":all-reduce bucket 1"))) << rank;
    // Nesting on the training track: each span ends before the enclosing one does.
    std::vector<Span> stack;
    std::map<std::string, int> names;
    for (const Span& s : spans(events, rank, 0)) {
      while (!stack.empty() && stack.back().end <= s.begin) stack.pop_back();
      if (!stack.empty()) {
        EXPECT_LE(s.end, stack.back().end) << s.name << " in " << stack.back().name;
      }
      if (s.name == "forward" || s.name == "backward") {
        EXPECT_EQ(stack.empty() ? "" : stack.back().name, "step");
      }
      stack.push_back(s);
      ++names[s.name];
    }
    EXPECT_EQ(names["step"], 6);
    EXPECT_EQ(names["backward"], 6);
    EXPECT_EQ(names["evaluation"], 1);
    EXPECT_EQ(names["checkpoint of epoch 1"], 1);
    // Overlap: in some step, a bucket's all-reduce started before that step's backward ended.
    std::map<int64_t, int64_t> backward_end;
    for (const Span& s : spans(events, rank, 0))
      if (s.name == "backward") backward_end[s.step] = s.end;
    int overlapping = 0, all_reduces = 0;
    for (int tid = 2; tid < 10; ++tid) {
      for (const Span& s : spans(events, rank, tid)) {
        EXPECT_EQ(s.name.rfind("all-reduce #", 0), 0u) << s.name;
        ++all_reduces;
        if (backward_end.count(s.step) && s.begin < backward_end[s.step]) ++overlapping;
      }
    }
    EXPECT_GE(all_reduces, 12);  // two buckets or more in each of the 6 steps
    EXPECT_GT(overlapping, 0);
  }
  if (!test::parts::kPlot) return;
  const auto plot =
      test::run({test::train_bin(), "plot-trace", out / "t.json", "-o", out / "timeline.png"});
  ASSERT_EQ(plot.exit_code, 0) << plot.output;
  EXPECT_GT(std::filesystem::file_size(out / "timeline.png"), 1000u);
}

TEST_F(TrainerTest, StragglerLineNamesTheSlowedRank) {
  const test::TempDir out;
  const auto r =
      test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1", "--max-steps",
                 "10", "--no-eval", "--nproc-per-node", "2", "--metrics", out / "m.jsonl"},
                {{"DDP_FAULT", "slow@3:1:200"}}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("stragglers: rank 1 kept the others waiting"), std::string::npos)
      << r.output;
  EXPECT_EQ(last_value(out / "m.jsonl", "straggler_rank"), 1);
  // 8 steps x 200 ms; the margins leave room for a loaded machine, where a step without the delay
  // alone has taken over 80 ms (CI runs tests side by side).
  EXPECT_GT(last_value(out / "m.jsonl", "straggler_wait_seconds"), 1.0);
  EXPECT_GT(last_value(out / "m.jsonl", "rank1_vs_fastest"), 1.5);
  EXPECT_NEAR(last_value(out / "m.jsonl", "rank0_vs_fastest"), 1.0, 1e-9);
}

TEST_F(TrainerTest, MalformedSlowFaultIsRefused) {
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--max-steps", "1"},
                           {{"DDP_FAULT", "slow@3:1"}}, 60s);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("DDP_FAULT: 'slow@3:1' is not slow@STEP:RANK:MS"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ddp
