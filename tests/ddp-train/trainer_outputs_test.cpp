// What ddp-train writes, as real processes: the progress bar and summary, TensorBoard event
// files, plots of the metrics and the per-rank step trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include <torch/cuda.h>

#include "ddp-train/report/tensorboard.h"
#include "ddp/error.h"
#include "support/parts.h"
#include "support/process.h"
#include "support/trainer_fixture.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// On a terminal (here: as a launcher on one says, DDP_STDOUT_TTY=1) rank 0 redraws a progress
// line in place; in a pipe it does not. Either way the run ends with the summary table.
TEST_F(TrainerTest, ProgressBarOnATerminalAndASummaryTableAlways) {
  const std::vector<std::string> argv = {
      test::train_bin(), "--data-dir", data_->path(), "--epochs", "2", "--max-steps", "8"};
  const auto plain = test::run(argv, {{"DDP_STDOUT_TTY", "0"}});
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("ETA"), std::string::npos) << plain.output;
  for (const char* text :
       {"summary: 2 epoch(s)", "  epoch  train_loss  test_loss  test_acc", "best test_acc ",
        "final test accuracy per class:", "    airplane ", "    truck "}) {
    EXPECT_NE(plain.output.find(text), std::string::npos) << text << plain.output;
  }
  const auto live = test::run(argv, {{"DDP_STDOUT_TTY", "1"}});
  ASSERT_EQ(live.exit_code, 0) << live.output;
  EXPECT_NE(live.output.find("epoch 1/2 [########################] 100% 8/8  loss "),
            std::string::npos)
      << live.output;
  EXPECT_NE(live.output.find("ETA 0:00\033[K\r"), std::string::npos) << live.output;
  // Through the launcher: rank 0's line is relayed with its prefix, still redrawn in place.
  std::vector<std::string> launched = argv;
  launched.insert(launched.end(), {"--nproc-per-node", "2"});
  const auto relayed = test::run(launched, {{"DDP_STDOUT_TTY", "1"}}, 120s);
  ASSERT_EQ(relayed.exit_code, 0) << relayed.output;
  EXPECT_NE(relayed.output.find("[rank 0] epoch 2/2 [########################] 100% 8/8"),
            std::string::npos)
      << relayed.output;
  EXPECT_NE(relayed.output.find("[rank 0] summary: 2 epoch(s)"), std::string::npos)
      << relayed.output;
}

// Without evaluation the summary shows no test figures (not zeros: found on the GPU machine,
// where a resumed --no-eval run printed "0.0000  0.00%").
TEST_F(TrainerTest, SummaryWithoutEvaluationShowsNoTestFigures) {
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "1",
                            "--max-steps", "2", "--no-eval"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("      1      "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("          -         -  "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("0.00%"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("best test_acc"), std::string::npos) << r.output;
}

// --tensorboard DIR: one event file whose records read back (checksums, protobuf) to the same
// curves as the JSON metrics; a damaged record is reported, not misread.
TEST_F(TrainerTest, TensorBoardEventFilesReadBackToTheMetrics) {
  DDP_SKIP_WITHOUT(kTensorBoard);
  EXPECT_EQ(train::crc32c("123456789", 9), 0xe3069283u);  // the CRC-32C check value
  test::TempDir out;
  const auto r = test::run(
      {test::train_bin(), "--data-dir", data_->path(), "--epochs", "2", "--max-steps", "8",
       "--log-every", "4", "--tensorboard", out / "tb", "--metrics", out / "m.jsonl"},
      {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(out / "tb")) {
    files.push_back(e.path());
  }
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("events.out.tfevents."), std::string::npos) << files[0];
  const auto events = train::read_events(files[0]);
  std::map<std::string, std::vector<train::ScalarEvent>> curves;
  for (const auto& e : events) curves[e.tag].push_back(e);
  ASSERT_EQ(curves["train/loss"].size(), 4u);  // steps 4, 8, 12, 16
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(curves["train/loss"][i].step, int64_t(4 * (i + 1)));
  ASSERT_EQ(curves["train/lr"].size(), 4u);
  EXPECT_FLOAT_EQ(curves["train/lr"][0].value, 0.001f);
  ASSERT_EQ(curves["epoch/test_accuracy"].size(), 2u);
  EXPECT_EQ(curves["epoch/test_accuracy"][1].step, 16);
  EXPECT_NEAR(curves["epoch/test_accuracy"][1].value, last_value(out / "m.jsonl", "test_acc"),
              1e-6);
  EXPECT_EQ(curves["epoch/test_loss"].size(), 2u);
  EXPECT_EQ(curves["epoch/images_per_second"].size(), 2u);

  std::string bytes = test::read_file(files[0]);
  bytes[bytes.size() - 6] ^= 0x40;  // inside the last record's message
  std::ofstream(out / "damaged", std::ios::binary) << bytes;
  try {
    train::read_events(out / "damaged");
    ADD_FAILURE() << "a damaged record was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data checksum does not match"), std::string::npos)
        << e.what();
  }
}

// ddp-train plot: a PNG and an SVG of the last run in a metrics file; bad input is a clear error.
TEST_F(TrainerTest, PlotDrawsTheMetricsAsPngAndSvg) {
  DDP_SKIP_WITHOUT(kPlot);
  test::TempDir out;
  const auto r = test::run({test::train_bin(), "--data-dir", data_->path(), "--epochs", "3",
                            "--max-steps", "4", "--metrics", out / "m.jsonl"},
                           {}, 180s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto png = test::run({test::train_bin(), "plot", out / "m.jsonl", "-o", out / "c.png"});
  ASSERT_EQ(png.exit_code, 0) << png.output;
  EXPECT_NE(png.output.find("plot: 3 epoch(s)"), std::string::npos) << png.output;
  const std::string png_bytes = test::read_file(out / "c.png");
  ASSERT_GT(png_bytes.size(), 2000u);
  EXPECT_EQ(png_bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const auto svg = test::run({test::train_bin(), "plot", out / "m.jsonl", "-o", out / "c.svg"});
  ASSERT_EQ(svg.exit_code, 0) << svg.output;
  const std::string svg_text = test::read_file(out / "c.svg");
  EXPECT_NE(svg_text.find("<svg"), std::string::npos);
  // PLplot writes text as character references: the title "test accuracy" begins "&#x74;&#x65;".
  EXPECT_NE(svg_text.find("&#x74;&#x65;&#x73;&#x74;&#x20;&#x61;"), std::string::npos);
  EXPECT_EQ(svg_text.find("fill=\"#FFFFFF\"\n        fill-opacity=\"1.000000\"\n        "
                          "xml:space"),
            std::string::npos)
      << "white text on the white background";

  const auto gif = test::run({test::train_bin(), "plot", out / "m.jsonl", "-o", out / "c.gif"});
  EXPECT_EQ(gif.exit_code, 2) << gif.output;
  EXPECT_NE(gif.output.find("must end in .png or .svg"), std::string::npos) << gif.output;
  std::ofstream(out / "empty.jsonl") << "{\"step\": 1, \"loss\": 2.3}\n";
  const auto empty =
      test::run({test::train_bin(), "plot", out / "empty.jsonl", "-o", out / "e.png"});
  EXPECT_EQ(empty.exit_code, 1) << empty.output;
  EXPECT_NE(empty.output.find("no epoch records"), std::string::npos) << empty.output;
  const auto unwritable =
      test::run({test::train_bin(), "plot", out / "m.jsonl", "-o", "/nonexistent/c.png"});
  EXPECT_EQ(unwritable.exit_code, 1) << unwritable.output;
  EXPECT_NE(unwritable.output.find("cannot write it"), std::string::npos) << unwritable.output;
}

// --step-trace: each rank writes one line per step whose times follow the step's order, and the
// bench's summary reads them (the ranks wait for each other, so it reports the collective's
// latency); an earlier trace at the same prefix is replaced. A prefix in a missing directory is
// refused before training, naming the file.
TEST_F(TrainerTest, StepTraceTimesEveryStepOnEveryRank) {
  test::TempDir out;
  const std::string prefix = out / "trace";
  std::ofstream(prefix + ".1.csv") << "an earlier run's trace, longer than its header line\n";
  const auto r = test::run(
      {test::train_bin(), "--nproc-per-node", "2", "--data-dir", data_->path(), "--epochs", "1",
       "--max-steps", "6", "--batch-size", "16", "--no-eval", "--step-trace", prefix},
      {}, 120s);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream in(prefix + "." + std::to_string(rank) + ".csv");
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(line,
              "epoch,step,start,batch_ready,forward_done,backward_done,averaged,done,cpu_seconds");
    int steps = 0;
    while (std::getline(in, line)) {
      ++steps;
      std::vector<double> v;
      std::stringstream fields(line);
      for (std::string f; std::getline(fields, f, ',');) v.push_back(std::stod(f));
      ASSERT_EQ(v.size(), 9u) << line;
      EXPECT_EQ(v[1], steps) << line;
      for (size_t i = 3; i < 8; ++i) EXPECT_LE(v[i - 1], v[i]) << "column " << i << ": " << line;
      EXPECT_GT(v[8], 0) << line;  // the step used CPU time
    }
    EXPECT_EQ(steps, 6) << "rank " << rank;
  }
  const auto summary =
      test::run({"/usr/bin/python3", test::source_dir() + "/tools/step_trace.py", "ddp=" + prefix});
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  EXPECT_TRUE(std::regex_search(summary.output,
                                std::regex(R"(\| ddp \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| )")))
      << summary.output;

  const auto bad = test::run({test::train_bin(), "--data-dir", data_->path(), "--max-steps", "1",
                              "--step-trace", out / "missing/trace"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--step-trace: cannot open " + (out / "missing/trace.0.csv")),
            std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace ddp
