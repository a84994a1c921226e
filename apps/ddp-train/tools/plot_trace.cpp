// ddp-train plot-trace TRACE.json -o timeline.png: the last steps of a --trace file drawn as a
// Gantt chart with PLplot, for a look without a browser. Each rank has a row of compute (data
// wait, forward, backward, the wait for the all-reduce, optimizer in their colours) and a row
// for each gradient bucket's all-reduce, so the overlap of communication with backward shows.
#include "tools/plot_trace.h"

#include "ddp_build_config.h"

#if defined(DDP_HAVE_PLOT)
#include <plplot/plplot.h>
#endif

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"
#include "flags.h"

namespace ddp::train {
namespace {

const char* kUsage =
    "usage: ddp-train plot-trace TRACE.json -o FILE.png|FILE.svg [--steps N]\n"
    "Draws the last N training steps (default 3) of a --trace file: a row of compute and a row\n"
    "for each gradient bucket's all-reduce, for every rank.\n";

struct Bar {
  std::string name;
  int rank, track;  // track 0: compute; 2 + b: bucket b's all-reduces
  double begin_us, end_us;
  int64_t step;
};

std::vector<Bar> read_bars(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError(c10::str(path, ": cannot read it (a --trace file of ddp-train)"));
  std::stringstream text;
  text << in.rdbuf();
  std::vector<Bar> bars;
  try {
    const nlohmann::json trace = nlohmann::json::parse(text.str());
    for (const auto& e : trace.at("traceEvents")) {
      if (e.value("ph", "") != "X") continue;
      const auto& args = e.value("args", nlohmann::json::object());
      const double ts = e.at("ts").get<double>();
      bars.push_back({e.at("name").get<std::string>(), e.at("pid").get<int>(),
                      e.at("tid").get<int>(), ts, ts + e.at("dur").get<double>(),
                      args.value("step", int64_t(-1))});
    }
  } catch (const nlohmann::json::exception& e) {
    throw DataError(c10::str(path, " is not a Chrome trace (--trace): ", e.what()));
  }
  return bars;
}

// The time window of the last `steps` steps (over all ranks), and its bars.
std::vector<Bar> last_steps(const std::vector<Bar>& bars, int64_t steps, double& t0, double& t1) {
  int64_t last = -1;
  for (const Bar& b : bars)
    if (b.name == "step") last = std::max(last, b.step);
  if (last < 0) throw DataError("the trace has no training steps");
  const int64_t first = std::max<int64_t>(1, last - steps + 1);
  t0 = 1e300;
  t1 = -1e300;
  for (const Bar& b : bars) {
    if (b.name != "step" || b.step < first) continue;
    t0 = std::min(t0, b.begin_us);
    t1 = std::max(t1, b.end_us);
  }
  std::vector<Bar> shown;
  for (const Bar& b : bars) {
    if (b.track == 1 || b.name == "step" || b.end_us < t0 || b.begin_us > t1) continue;
    shown.push_back(b);
  }
  return shown;
}

#if defined(DDP_HAVE_PLOT)
// PLplot's colour map 0: 1 red, 2 yellow, 3 green, 7 grey, 9 blue, 10 blue-violet, 13 violet.
int colour_of(const Bar& b) {
  if (b.track >= 2) return 13;
  if (b.name == "data wait") return 7;
  if (b.name == "forward") return 1;
  if (b.name == "backward") return 9;
  if (b.name == "all-reduce wait") return 2;
  if (b.name == "optimizer") return 3;
  return 10;  // evaluation, checkpoint
}

void draw(const std::vector<Bar>& bars, double t0, double t1, const std::string& title,
          const std::string& out) {
  std::map<std::pair<int, int>, int> rows;  // (rank, track) → row, rank 0's compute on top
  for (const Bar& b : bars) rows[{b.rank, b.track}] = 0;
  int next = int(rows.size());
  for (auto& [key, row] : rows) row = --next;
  plsdev(out.size() > 4 && out.compare(out.size() - 4, 4, ".svg") == 0 ? "svg" : "pngcairo");
  plsfnam(out.c_str());
  plsetopt("geometry", c10::str("1200x", 120 + 40 * rows.size()).c_str());
  plscolbg(255, 255, 255);
  plscol0(15, 0, 0, 0);
  plinit();
  pladv(0);
  plvpor(0.16, 0.97, 0.15, 0.88);
  plwind(0, (t1 - t0) / 1e3, 0, double(rows.size()));
  plcol0(15);
  plbox("bcnst", 0, 0, "bc", 0, 0);
  pllab("milliseconds", "", "");
  plmtex("t", 2.2, 0.5, 0.5, title.c_str());
  plschr(0, 0.75);
  plmtex("t", 0.8, 0.5, 0.5,
         "data wait grey, forward red, backward blue, all-reduce wait yellow, optimizer green; "
         "bucket all-reduces violet");
  for (const auto& [key, row] : rows) {
    const std::string label = key.second == 0
                                  ? c10::str("rank ", key.first, " compute")
                                  : c10::str("rank ", key.first, " bucket ", key.second - 2);
    plmtex("lv", 1.0, (row + 0.5) / double(rows.size()), 1.0, label.c_str());
  }
  plschr(0, 1.0);
  for (const Bar& b : bars) {
    const int row = rows[{b.rank, b.track}];
    PLFLT x[4] = {(std::max(b.begin_us, t0) - t0) / 1e3, (std::min(b.end_us, t1) - t0) / 1e3, 0, 0};
    x[2] = x[1];
    x[3] = x[0];
    PLFLT y[4] = {row + 0.15, row + 0.15, row + 0.85, row + 0.85};
    plcol0(colour_of(b));
    plfill(4, x, y);
  }
  plend();
}
#else
void draw(const std::vector<Bar>&, double, double, const std::string&, const std::string& out) {
  throw InvalidArgument(c10::str("plot-trace: cannot draw ", out,
                                 ": this ddp-train was built without PLplot (DDP_WITH_PLOT=OFF; "
                                 "Debian: libplplot-dev, plplot-driver-cairo)"));
}
#endif

}  // namespace

int run_plot_trace(const std::vector<std::string>& args) {
  std::string trace, out;
  int64_t steps = 3;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    const bool takes_value = args[i] == "-o" || args[i] == "--out" || args[i] == "--steps";
    if (takes_value && i + 1 >= args.size())
      throw InvalidArgument(c10::str("plot-trace: ", args[i], " needs a value"));
    if (args[i] == "-o" || args[i] == "--out") {
      out = args[++i];
    } else if (args[i] == "--steps") {
      steps = int(cli::parse_int64("plot-trace --steps", args[++i], 1, 1000));
    } else if (trace.empty() && args[i].rfind("-", 0) != 0) {
      trace = args[i];
    } else {
      throw InvalidArgument(c10::str("plot-trace: unexpected argument '", args[i], "'\n", kUsage));
    }
  }
  if (trace.empty() || out.empty())
    throw InvalidArgument(c10::str("plot-trace needs a trace file and -o FILE\n", kUsage));
  const bool known = out.size() > 4 && (out.compare(out.size() - 4, 4, ".png") == 0 ||
                                        out.compare(out.size() - 4, 4, ".svg") == 0);
  if (!known)
    throw InvalidArgument(c10::str("plot-trace -o ", out, ": it must end in .png or .svg"));
  {  // PLplot exits the process when it cannot open its file: find out first, with a message.
    std::ofstream probe(out);
    if (!probe) throw IoError(c10::str("plot-trace -o ", out, ": cannot write it"));
  }
  double t0 = 0, t1 = 0;
  const std::vector<Bar> bars = last_steps(read_bars(trace), steps, t0, t1);
  draw(bars, t0, t1, c10::str("ddp-train --trace: the last ", steps, " step(s) of ", trace), out);
  std::printf("plot-trace: the last %lld step(s) of %s (%.1f ms) drawn to %s\n", (long long)steps,
              trace.c_str(), (t1 - t0) / 1e3, out.c_str());
  return 0;
}

}  // namespace ddp::train
