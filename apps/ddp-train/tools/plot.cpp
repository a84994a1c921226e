#include "tools/plot.h"

#include "ddp_build_config.h"

#if defined(DDP_HAVE_PLOT)
#include <plplot/plplot.h>
#endif

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <regex>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::train {
namespace {

const char* kPlotUsage =
    "usage: ddp-train plot METRICS.jsonl -o FILE.png|FILE.svg\n"
    "Draws the train and test loss and the test accuracy of the last run in a --metrics file\n"
    "against epochs.\n";

// The number after "key": in a JSON line, if the key is there.
bool number_field(const std::string& line, const std::string& key, double& value) {
  const std::regex re("\"" + key + "\": ([-0-9.eE+]+)");
  std::smatch m;
  if (!std::regex_search(line, m, re)) return false;
  value = std::stod(m[1]);
  return true;
}

struct Panel {
  const char* y_label;
  double y_min, y_max;
};

#if defined(DDP_HAVE_PLOT)
// Axes, labels, then each curve in its colour (PLplot's map 0: 1 red, 3 green, 9 blue).
void draw_panel(const std::vector<PLFLT>& x, const std::vector<std::vector<PLFLT>>& curves,
                const std::vector<int>& colours, const Panel& panel, const char* title) {
  pladv(0);
  plvsta();
  plwind(x.front(), std::max(x.back(), x.front() + 1), panel.y_min, panel.y_max);
  plcol0(15);  // black (set in plot()) on the white background
  plbox("bcnst", 0, 0, "bcnstv", 0, 0);
  pllab("epoch", panel.y_label, title);
  for (size_t c = 0; c < curves.size(); ++c) {
    if (curves[c].empty()) continue;
    plcol0(colours[c]);
    plwidth(2);
    plline(PLINT(curves[c].size()), x.data(), curves[c].data());
    plwidth(1);
  }
}

void plot(const std::vector<EpochPoint>& points, const std::string& out) {
  const bool svg = out.size() > 4 && out.compare(out.size() - 4, 4, ".svg") == 0;
  const bool png = out.size() > 4 && out.compare(out.size() - 4, 4, ".png") == 0;
  if (!svg && !png) {
    throw InvalidArgument(c10::str("plot -o ", out, ": the file must end in .png or .svg"));
  }
  {  // PLplot exits the process when it cannot open its file: find out first, with a message.
    std::ofstream probe(out);
    if (!probe) throw IoError(c10::str("plot -o ", out, ": cannot write it"));
  }
  std::vector<PLFLT> x, train_loss, test_loss, test_acc;
  for (const auto& p : points) {
    x.push_back(p.epoch);
    train_loss.push_back(p.train_loss);
    if (p.test_loss >= 0) test_loss.push_back(p.test_loss);
    if (p.test_acc >= 0) test_acc.push_back(100 * p.test_acc);
  }
  if (test_loss.size() != x.size()) test_loss.clear();  // evaluated in some epochs only
  if (test_acc.size() != x.size()) test_acc.clear();
  double loss_max = *std::max_element(train_loss.begin(), train_loss.end());
  for (double v : test_loss) loss_max = std::max(loss_max, v);

  plsdev(svg ? "svg" : "pngcairo");
  plsfnam(out.c_str());
  plsetopt("geometry", "1000x450");
  plscolbg(255, 255, 255);
  plscol0(15, 0, 0, 0);  // colour 15 (white by default) becomes black: axes and labels
  plssub(2, 1);
  plinit();
  draw_panel(x, {train_loss, test_loss}, {1, 9}, {"loss", 0, loss_max * 1.05},
             "loss: train (red), test (blue)");
  draw_panel(x, {test_acc}, {3}, {"test accuracy (%)", 0, 100}, "test accuracy");
  plend();
}

#else
void plot(const std::vector<EpochPoint>&, const std::string& out) {
  throw InvalidArgument(c10::str("plot: cannot draw ", out,
                                 ": this ddp-train was built without "
                                 "PLplot (DDP_WITH_PLOT=OFF; Debian: libplplot-dev, "
                                 "plplot-driver-cairo)"));
}
#endif  // DDP_HAVE_PLOT

}  // namespace

std::vector<EpochPoint> read_epoch_points(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(c10::str(path, ": cannot read it (a --metrics file of ddp-train)"));
  std::vector<EpochPoint> points;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find("\"config\":") != std::string::npos) points.clear();  // a new run begins
    EpochPoint p;
    if (!number_field(line, "train_loss", p.train_loss)) continue;  // a step record
    if (!number_field(line, "epoch", p.epoch)) {
      throw DataError(c10::str(path, ":", number, ": an epoch record without \"epoch\""));
    }
    number_field(line, "test_loss", p.test_loss);
    number_field(line, "test_acc", p.test_acc);
    points.push_back(p);
  }
  if (points.empty()) {
    throw DataError(c10::str(path,
                             ": no epoch records (lines with \"train_loss\"); is it a "
                             "--metrics file of a run that finished an epoch?"));
  }
  return points;
}

int run_plot(const std::vector<std::string>& args) {
  std::string metrics, out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(kPlotUsage, stdout);
      return 0;
    }
    if (args[i] == "-o" || args[i] == "--out") {
      if (i + 1 >= args.size()) throw InvalidArgument(c10::str(args[i], " needs a value (FILE)"));
      out = args[++i];
    } else if (metrics.empty() && args[i].rfind("-", 0) != 0) {
      metrics = args[i];
    } else {
      throw InvalidArgument(c10::str("plot: unexpected argument '", args[i], "'\n", kPlotUsage));
    }
  }
  if (metrics.empty() || out.empty()) {
    throw InvalidArgument(c10::str("plot needs a metrics file and -o FILE\n", kPlotUsage));
  }
  const std::vector<EpochPoint> points = read_epoch_points(metrics);
  plot(points, out);
  std::printf("plot: %zu epoch(s) of %s drawn to %s\n", points.size(), metrics.c_str(),
              out.c_str());
  return 0;
}

}  // namespace ddp::train
