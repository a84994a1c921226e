// The launcher's elastic mode (LaunchOptions::rdzv_backend "c10d"): this node's agent joins a
// round of the job's rendezvous (rendezvous.h), runs its workers as that round's world,
// and starts over in a new round whenever the membership changes (a node lost, a node arriving)
// or a worker fails (which uses up one of --max-restarts). Internal to libddp (launch.cpp).
#pragma once

#include <vector>

#include "ddp/elastic/launch.h"
#include "elastic/launch_guards.h"

namespace ddp {

/// Runs this node's part of the job until it ends; returns launch()'s exit code.
int launch_elastic(const LaunchOptions& options, const StopSignals& stop,
                   const std::vector<std::vector<int>>& cpu_shares);

/// HOST:PORT split (a bare HOST takes torchrun's default port 29400); InvalidArgument otherwise.
std::pair<std::string, int> parse_endpoint(const std::string& endpoint);

}  // namespace ddp
