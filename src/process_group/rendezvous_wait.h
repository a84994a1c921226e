// Waiting at the rendezvous, saying what for. A client of the rendezvous store first waits for
// the store's port to accept connections itself, printing every few seconds what it waits for
// (the address, the time left), so that c10d's own client never enters its retry loop (whose
// warnings carry stack traces) and a master that never comes fails at the rendezvous timeout
// with one line. Then, while the ranks meet, the ones present and missing are printed likewise.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace ddp {

/// How often a waiting rank says what it waits for.
inline constexpr std::chrono::seconds kRendezvousProgressEvery{5};

/// One connection attempt of at most `limit`: whether HOST:PORT accepted it (a name that does
/// not resolve yet counts as no).
bool store_accepts(const std::string& host, int port, std::chrono::milliseconds limit);

/// Returns once HOST:PORT accepts a TCP connection; throws TimeoutError after `timeout`, naming
/// the address. `rank` names the waiting process in the progress lines (stderr).
void wait_for_store_server(const std::string& host, int port, std::chrono::milliseconds timeout,
                           int rank);

/// Calls `progress(seconds waited, seconds left)` every kRendezvousProgressEvery while `done()`
/// is false, polling it every 50 ms, until the deadline; returns done()'s last answer.
bool wait_with_progress(const std::function<bool()>& done, std::chrono::milliseconds timeout,
                        const std::function<void(double, double)>& progress);

}  // namespace ddp
