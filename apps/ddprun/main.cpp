// ddprun: start N workers of any program linked with libddp, with torchrun's conventions.
//   ddprun --nproc-per-node 4 -- ./my_program --its-flags
//   ddprun --nnodes 2 --node-rank 0 --master-addr HOST0 --master-port 29500 --nproc-per-node 2 --
//   ./my_program
//   ddprun --nnodes 2:4 --rdzv-backend c10d --rdzv-endpoint HOST0:29400 --rdzv-id job1
//   --nproc-per-node 2 -- ./my_program
#include <cstdio>
#include <string>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/elastic/launch.h"
#include "ddp/environment.h"
#include "ddp/error.h"
#include "elastic_flags.h"
#include "flags.h"

namespace {

using O = ddp::LaunchOptions;
namespace env = ddp::env;

// The flags, one entry each: a declarative table.
const ddp::cli::FlagTable<O>& table() {
  using namespace ddp::cli;
  static const FlagTable<O> flags = [] {
    std::vector<Flag<O>> list = {
        int_flag<O>("--nproc-per-node", "N", "workers on this node (default 1)",
                    DDP_CLI_FIELD(nproc_per_node), 1, 1024),
        int_flag<O>("--node-rank", "R",
                    "this node's index, 0..M-1 (default 0; node 0 hosts rank 0)",
                    DDP_CLI_FIELD(node_rank), 0, 65535),
        text_flag<O>("--master-addr", "A",
                     "rank 0's node address (default 127.0.0.1; required across nodes)",
                     DDP_CLI_FIELD(master_addr)),
        int_flag<O>("--master-port", "P",
                    "the store's port (default: a free port; required across nodes)",
                    DDP_CLI_FIELD(master_port), 1, 65535),
        real_flag<O>("--grace", "SECONDS",
                     "between SIGTERM and SIGKILL when stopping workers (default 5)",
                     DDP_CLI_FIELD(grace_seconds), 0, 3600),
        text_flag<O>("--log-dir", "DIR", "also write each rank's output whole to DIR/rank_N.log",
                     DDP_CLI_FIELD(log_dir)),
        choice_flag<O>("--cpu-bind", "HOW", kCpuBindHelp, DDP_CLI_FIELD(cpu_bind), "CPU binding",
                       kCpuBindNames),
        switch_flag<O>("--rank0-only", "show only rank 0's output on the console",
                       DDP_CLI_FIELD(console_rank0_only)),
        text_flag<O>("--debug-dir", "DIR",
                     c10::str("the workers write their flight records to DIR (", env::kDebugDir,
                              ") when a collective fails or times out, or on SIGTERM; when the "
                              "job fails, ddprun names the rank the others waited for"),
                     DDP_CLI_FIELD(debug_dir)),
    };
    for (Flag<O>& f : elastic_flags<O>([](auto& o) -> auto& { return o; })) list.push_back(f);
    return FlagTable<O>("ddprun", std::move(list), /*underscores_as_dashes=*/true);
  }();
  return flags;
}

std::string help() {
  return "usage: ddprun [FLAGS] [--] PROGRAM [ARGS...]\n\n"
         "Starts PROGRAM once per worker with torchrun's environment (" +
         c10::str(env::kRank, ", ", env::kWorldSize, ", ", env::kLocalRank, ",\n",
                  env::kLocalWorldSize, ", ", env::kGroupRank, ", ", env::kMasterAddr, ", ",
                  env::kMasterPort, ", ", env::kRestartCount) +
         ").\nWhen a worker fails, the others are stopped (SIGTERM, then SIGKILL) and the "
         "failure named.\n\nflags:\n" +
         table().help() +
         "torchrun's spellings (--nproc_per_node, --master_addr, ...) are accepted too.\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  O o;
  o.name("ddprun");
  try {
    bool want_help = false;
    const size_t program = table().parse(args, o, want_help, ddp::cli::Positional::kStop);
    if (want_help) {
      std::fputs(help().c_str(), stdout);
      return 0;
    }
    o.command({args.begin() + long(program), args.end()});
    if (o.command().empty()) {  // said here, in this program's terms, not as launch()'s option
      std::fputs("ddprun: error: no program to run; usage: ddprun [FLAGS] -- PROGRAM ARGS...\n",
                 stderr);
      return 2;
    }
    return ddp::launch(o);
  } catch (const ddp::InvalidArgument& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return 1;
  }
}
