// ddp-train: the reference program done right. main() reads top to bottom as the recipe:
// subcommand → flags → (launch workers) → train; every ddp::Error becomes one line on stderr
// and a non-zero exit.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <torch/version.h>

#include "ddp/debug/hang_analysis.h"
#include "ddp/elastic/cpu_binding.h"
#include "ddp/elastic/launch.h"
#include "ddp/environment.h"
#include "ddp/error.h"
#include "ddp/models/net.h"
#include "ddp/process_group.h"
#include "ddp/world.h"
#include "lm/generate.h"
#include "lm/lm_training.h"
#include "options.h"
#include "tools/make_data.h"
#include "tools/plot.h"
#include "tools/plot_trace.h"
#include "tools/preview.h"
#include "train/trainer.h"

namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

// What this build can do: the LibTorch it was compiled against, the c10d backends and devices
// compiled in (and the GPUs visible now), and what computes Net's layers on this CPU.
void print_version() {
  std::printf("ddp-train, built against LibTorch %d.%d.%d (C++%ld)\n", TORCH_VERSION_MAJOR,
              TORCH_VERSION_MINOR, TORCH_VERSION_PATCH, __cplusplus / 100 % 100);
  std::string built, missing;
  for (const char* backend : {"gloo", "nccl", "mpi"}) {
    std::string& list = ddp::ProcessGroup::has_backend(backend) ? built : missing;
    list += (list.empty() ? "" : ", ") + std::string(backend);
  }
  std::printf("backends: %s%s\n", built.c_str(),
              missing.empty() ? "" : (" (not compiled in: " + missing + ")").c_str());
  if (ddp::ProcessGroup::has_backend("nccl")) {
    std::printf("devices: cpu, cuda (%d GPU(s) visible)\n", int(torch::cuda::device_count()));
  } else {
    std::printf("devices: cpu (this LibTorch has no CUDA)\n");
  }
  std::printf("Net's layers on this CPU (CIFAR-10's images, fp32): %s\n",
              ddp::models::Net()->kernels().c_str());
}

std::string self_executable() {
  char path[4096];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) throw ddp::Error("cannot find this program's path in /proc/self/exe");
  path[n] = '\0';
  return path;
}

int train(const std::vector<std::string>& args) {
  bool help = false;
  const ddp::train::TrainOptions options = ddp::train::parse_train_options(args, help);
  if (help) {
    std::fputs(ddp::train::train_help().c_str(), stdout);
    return 0;
  }
  const ddp::WorldInfo world = ddp::WorldInfo::from_environment();
  if (options.dry_run) {
    const bool will_launch = options.nproc_per_node > 0 && world.source == "default";
    const int ranks = will_launch ? options.nproc_per_node : world.world_size;
    if (ddp::train::is_language_model(options.model)) {
      ddp::train::print_language_model_plan(options, ranks);
    } else {
      ddp::train::print_plan(options, ranks);
    }
    return 0;
  }
  if (options.nproc_per_node > 0 && world.source == "default") {
    // The reference program's mp.spawn: this process becomes the launcher of N workers of
    // itself, with the same flags minus the launcher's own.
    ddp::LaunchOptions launch = options.launcher;  // --nnodes, --rdzv-*, --max-restarts, ...
    launch.name("ddp-train");
    launch.nproc_per_node(options.nproc_per_node);
    if (world.master_port_set) launch.master_port(world.master_port);
    launch.master_addr(world.master_addr);
    launch.debug_dir(options.debug_dir);
    launch.cpu_bind(options.cpu_bind);
    launch.command({self_executable()});
    // The launcher's own flags stay with it; the workers get the rest.
    const std::vector<std::string> launcher_flags = ddp::train::launcher_flag_names();
    for (size_t i = 0; i < args.size(); ++i) {
      bool launcher_flag = false;
      for (const std::string& flag : launcher_flags) {
        if (args[i] == flag) {  // --flag VALUE
          launcher_flag = true;
          ++i;
          break;
        }
        if (args[i].rfind(flag + "=", 0) == 0) launcher_flag = true;
      }
      if (!launcher_flag) launch.command().push_back(args[i]);
    }
    return ddp::launch(launch);
  }
  if (options.nproc_per_node > 0 && world.rank == 0) {
    std::printf("ddp-train: --nproc-per-node ignored: already started by a launcher (%s)\n",
                world.source.c_str());
  }
  if (options.cpu_bind != ddp::CpuBind::kNone && !ddp::launched_with_cpu_binding() &&
      world.rank == 0) {
    std::printf(
        "ddp-train: --cpu-bind ignored: started by a launcher (%s), which places the "
        "workers (ddprun --cpu-bind cores)\n",
        world.source.c_str());
  }
  if (ddp::train::is_language_model(options.model)) {
    ddp::train::run_language_model_training(options, world);
  } else {
    ddp::train::run_training(options, world);
  }
  return 0;
}

// ddp-train analyze DIR: the verdict of a job's flight records (--debug-dir), afterwards.
int analyze(const std::vector<std::string>& args) {
  if (args.size() != 1 || args[0].rfind("-", 0) == 0) {
    std::fputs(
        "usage: ddp-train analyze DIR\nCompares the flight records a job run with --debug-dir "
        "DIR wrote (on a failure, a timeout or SIGTERM) and names the rank the others waited "
        "for, and the collective.\n",
        args.size() == 1 && args[0] == "--help" ? stdout : stderr);
    return args.size() == 1 && args[0] == "--help" ? 0 : kExitUsage;
  }
  const ddp::HangDiagnosis d = ddp::diagnose_hang(ddp::read_rank_records(args[0]));
  for (const std::string& line : d.lines) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string rank_tag;
  if (const char* r = std::getenv(ddp::env::kRank)) rank_tag = std::string(" (rank ") + r + ")";
  try {
    if (args.size() == 1 && args[0] == "--version") {
      print_version();
      return 0;
    }
    if (!args.empty() && args[0] == "make-data") {
      return ddp::train::run_make_data({args.begin() + 1, args.end()});
    }
    if (!args.empty() && args[0] == "analyze") return analyze({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "generate")
      return ddp::train::run_generate({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "plot-trace")
      return ddp::train::run_plot_trace({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "plot")
      return ddp::train::run_plot({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "preview")
      return ddp::train::run_preview({args.begin() + 1, args.end()});
    if (!args.empty() && args[0] == "evaluate") {
      bool help = false;
      const auto options = ddp::train::parse_train_options({args.begin() + 1, args.end()}, help);
      if (help) {
        std::fputs(ddp::train::train_help().c_str(), stdout);
        return 0;
      }
      ddp::train::run_evaluation(options, ddp::WorldInfo::from_environment());
      return 0;
    }
    return train(args);
  } catch (const ddp::InvalidArgument& e) {
    std::fprintf(stderr, "ddp-train%s: error: %s\n", rank_tag.c_str(), e.what());
    return kExitUsage;
  } catch (const ddp::PeerFailure& e) {
    std::fprintf(stderr, "ddp-train%s: error: %s\n", rank_tag.c_str(), e.what());
    return ddp::kExitPeerFailure;  // the launcher then looks for the rank that caused it
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ddp-train%s: error: %s\n", rank_tag.c_str(), e.what());
    return kExitError;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "ddp-train%s: error: %s\n", rank_tag.c_str(), e.what_without_backtrace());
    return kExitError;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddp-train%s: error: %s\n", rank_tag.c_str(), e.what());
    return kExitError;
  }
}
