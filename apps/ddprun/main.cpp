// ddprun: start N workers of any program linked with libddp, with torchrun's conventions.
//   ddprun --nproc-per-node 4 -- ./my_program --its-flags
//   ddprun --nnodes 2 --node-rank 0 --master-addr HOST0 --master-port 29500 --nproc-per-node 2 --
//   ./my_program
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddp/error.h"
#include "ddp/launch.h"
#include "ddp/world.h"

namespace {

const char* kHelp =
    "usage: ddprun [FLAGS] [--] PROGRAM [ARGS...]\n\n"
    "Starts PROGRAM once per worker with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,\n"
    "LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT).\n"
    "When a worker fails, the others are stopped (SIGTERM, then SIGKILL) and the failure named.\n\n"
    "flags:\n"
    "  --nproc-per-node N   workers on this node (default 1)\n"
    "  --nnodes M           nodes in the job (default 1)\n"
    "  --node-rank R        this node's index, 0..M-1 (default 0; node 0 hosts rank 0)\n"
    "  --master-addr A      rank 0's node address (default 127.0.0.1; required across nodes)\n"
    "  --master-port P      the store's port (default: a free port; required across nodes)\n"
    "  --max-restarts K     restart the workers up to K times after a failure (default 0)\n"
    "  --grace SECONDS      between SIGTERM and SIGKILL when stopping workers (default 5)\n"
    "  --log-dir DIR        also write each rank's output whole to DIR/rank_N.log\n"
    "  --rank0-only         show only rank 0's output on the console\n"
    "  --help               show this text\n"
    "torchrun's spellings (--nproc_per_node, --master_addr, ...) are accepted too.\n";

std::string normalize(std::string flag) {
  for (char& c : flag) {
    if (c == '_') c = '-';
  }
  return flag;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  ddp::LaunchOptions o;
  try {
    size_t i = 0;
    for (; i < args.size(); ++i) {
      std::string flag = args[i];
      if (flag == "--") {
        ++i;
        break;
      }
      if (flag.rfind("--", 0) != 0) break;  // the program starts here
      std::string value;
      bool has_value = false;
      const size_t eq = flag.find('=');
      if (eq != std::string::npos) {
        value = flag.substr(eq + 1);
        flag = flag.substr(0, eq);
        has_value = true;
      }
      flag = normalize(flag);
      if (flag == "--help") {
        std::fputs(kHelp, stdout);
        return 0;
      }
      if (flag == "--rank0-only") {
        o.console_rank0_only = true;
        continue;
      }
      if (!has_value) {
        if (i + 1 >= args.size()) throw ddp::InvalidArgument(ddp::concat(flag, " needs a value"));
        value = args[++i];
      }
      if (flag == "--nproc-per-node")
        o.nproc_per_node = ddp::parse_int(value, flag, 1, 1024);
      else if (flag == "--nnodes")
        o.nnodes = ddp::parse_int(value, flag, 1, 65536);
      else if (flag == "--node-rank")
        o.node_rank = ddp::parse_int(value, flag, 0, 65535);
      else if (flag == "--master-addr")
        o.master_addr = value;
      else if (flag == "--master-port")
        o.master_port = ddp::parse_int(value, flag, 1, 65535);
      else if (flag == "--max-restarts")
        o.max_restarts = ddp::parse_int(value, flag, 0, 1000);
      else if (flag == "--grace")
        o.grace_seconds = std::atof(value.c_str());
      else if (flag == "--log-dir")
        o.log_dir = value;
      else
        throw ddp::InvalidArgument(ddp::concat("unknown flag '", args[i], "'; see ddprun --help"));
    }
    o.command.assign(args.begin() + long(i), args.end());
    return ddp::launch(o);
  } catch (const ddp::InvalidArgument& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return 1;
  }
}
