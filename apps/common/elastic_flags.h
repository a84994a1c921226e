// The launcher's membership flags, with torchrun's names, shared by ddprun and ddp-train (which
// embeds the launcher): --nnodes M or MIN:MAX, --rdzv-backend, --rdzv-endpoint, --rdzv-id,
// --rdzv-conf, --max-restarts, --monitor-interval. `launch` maps a program's options to the
// LaunchOptions they hold (ddprun's are one; ddp-train's have a member).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/elastic/launch.h"
#include "flags.h"

namespace ddp::cli {

/// "M" as (M, M), "MIN:MAX" as (MIN, MAX); InvalidArgument naming `flag` otherwise. MIN > MAX
/// is left to the launcher, which says so with both numbers.
inline std::pair<int, int> parse_node_range(const std::string& flag, const std::string& text) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    const int n = int(parse_int64(flag, text, 1, 65536));
    return {n, n};
  }
  return {int(parse_int64(flag + " (MIN)", text.substr(0, colon), 1, 65536)),
          int(parse_int64(flag + " (MAX)", text.substr(colon + 1), 1, 65536))};
}

/// torchrun's --rdzv-conf: KEY=VALUE pairs separated by commas, of join_timeout,
/// last_call_timeout, keep_alive_interval (seconds) and keep_alive_max_attempt.
inline void parse_rdzv_conf(const std::string& flag, const std::string& text, LaunchOptions& o) {
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string pair = text.substr(start, comma - start);
    start = comma + 1;
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    const std::string key = pair.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : pair.substr(eq + 1);
    const std::string what = c10::str(flag, " ", key);
    if (key == "join_timeout") {
      o.join_timeout(parse_double(what, value, 0.001, 1e7));
    } else if (key == "last_call_timeout") {
      o.last_call(parse_double(what, value, 0, 1e7));
    } else if (key == "keep_alive_interval") {
      o.keep_alive(parse_double(what, value, 0.001, 1e5));
    } else if (key == "keep_alive_max_attempt") {
      o.keep_alive_max_attempt(int(parse_int64(what, value, 1, 1000)));
    } else {
      throw InvalidArgument(c10::str(flag, ": unknown key '", key,
                                     "'; use join_timeout, last_call_timeout, keep_alive_interval "
                                     "or keep_alive_max_attempt (KEY=VALUE,...)"));
    }
  }
}

/// The flags, for options `Options` whose LaunchOptions `launch(options)` returns (a callable
/// taking both `Options&` and `const Options&`: [](auto& o) -> auto& { return o.launch; }).
template <class Options, class Launch>
std::vector<Flag<Options>> elastic_flags(Launch launch) {
  auto conf_text = [](const LaunchOptions& o) {
    return c10::str("join_timeout=", number_text(o.join_timeout()),
                    ",last_call_timeout=", number_text(o.last_call()),
                    ",keep_alive_interval=", number_text(o.keep_alive()),
                    ",keep_alive_max_attempt=", o.keep_alive_max_attempt());
  };
  return {
      {"--nnodes", "M|MIN:MAX",
       "nodes in the job (default 1); MIN:MAX with --rdzv-backend c10d: each round has MIN to "
       "MAX nodes",
       [launch](Options& o, const std::string& v) {
         const auto [min, max] = parse_node_range("--nnodes", v);
         launch(o).min_nodes(min).nnodes(max);
       },
       [launch](const Options& o) {
         const LaunchOptions& l = launch(o);
         return l.min_nodes() > 0 && l.min_nodes() != l.nnodes()
                    ? c10::str(l.min_nodes(), ":", l.nnodes())
                    : std::to_string(l.nnodes());
       },
       ValueKind::kText},
      {"--rdzv-backend", "static|c10d",
       "static (default): a fixed --nnodes, each node given --node-rank and --master-addr; c10d: "
       "nodes join and leave, meeting at --rdzv-endpoint in rounds (torchrun's)",
       [launch](Options& o, const std::string& v) {
         parse_choice<std::string>("--rdzv-backend", "rendezvous backend", v,
                                   {{"static", "static"}, {"c10d", "c10d"}});
         launch(o).rdzv_backend(v);
       },
       [launch](const Options& o) { return launch(o).rdzv_backend(); }, ValueKind::kText},
      {"--rdzv-endpoint", "HOST[:PORT]",
       "c10d: where the nodes meet (port default 29400); the agent started on HOST hosts it",
       [launch](Options& o, const std::string& v) { launch(o).rdzv_endpoint(v); },
       [launch](const Options& o) { return launch(o).rdzv_endpoint(); }, ValueKind::kText},
      {"--rdzv-id", "ID", "c10d: the job's name (default none); jobs with other ids do not mix",
       [launch](Options& o, const std::string& v) { launch(o).rdzv_id(v); },
       [launch](const Options& o) { return launch(o).rdzv_id(); }, ValueKind::kText},
      {"--rdzv-conf", "K=V,...",
       "c10d: join_timeout (600 s), last_call_timeout (30 s), keep_alive_interval (5 s), "
       "keep_alive_max_attempt (3)",
       [launch](Options& o, const std::string& v) { parse_rdzv_conf("--rdzv-conf", v, launch(o)); },
       [launch, conf_text](const Options& o) { return conf_text(launch(o)); }, ValueKind::kText},
      {"--max-restarts", "K",
       "start the workers again up to K times after one of this node's fails (default 0); with "
       "c10d a node lost or added uses up none",
       [launch](Options& o, const std::string& v) {
         launch(o).max_restarts(int(parse_int64("--max-restarts", v, 0, 1000)));
       },
       [launch](const Options& o) { return std::to_string(launch(o).max_restarts()); },
       ValueKind::kNumber},
      {"--on-failure", "restart|continue",
       "a worker fails: restart (default) stops every worker and starts them again from the "
       "newest checkpoint; continue goes on at once without it (per-step fault tolerance), a "
       "newcomer replacing it while --max-restarts allows",
       [launch](Options& o, const std::string& v) {
         parse_choice<std::string>("--on-failure", "action", v,
                                   {{"restart", "restart"}, {"continue", "continue"}});
         launch(o).on_failure(v);
       },
       [launch](const Options& o) { return launch(o).on_failure(); }, ValueKind::kText},
      {"--monitor-interval", "SECONDS",
       "c10d: between two looks at the rendezvous while the workers run (default 0.1)",
       [launch](Options& o, const std::string& v) {
         launch(o).monitor_interval(parse_double("--monitor-interval", v, 0.001, 3600));
       },
       [launch](const Options& o) { return number_text(launch(o).monitor_interval()); },
       ValueKind::kNumber},
  };
}

}  // namespace ddp::cli
