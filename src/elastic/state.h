// The elastic rendezvous's state as every node sees it (rendezvous.cpp): which round,
// who is in it, who waits, and its text form, the one value in the store that the nodes replace
// whole by compare-and-set. Internal to libddp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

struct RendezvousState {
  int64_t round = 1;      // the round forming (complete = false) or running
  bool complete = false;  // formed: its participants run, newcomers wait
  int64_t deadline = 0;   // wall-clock ms when the last call ends (0: not started)
  std::vector<std::string> participants, waiting;
  std::vector<std::string> expected;  // the live nodes of the previous round, not yet back
  std::vector<std::string> previous;  // the previous round's order, kept by the next
  std::string cause;                  // why this round began
  std::string closed;                 // non-empty: the job is over, and how

  bool operator==(const RendezvousState& o) const {
    return round == o.round && complete == o.complete && deadline == o.deadline &&
           participants == o.participants && waiting == o.waiting && expected == o.expected &&
           previous == o.previous && cause == o.cause && closed == o.closed;
  }
};

/// The state as text, one "key value" line each, and back (a missing key keeps its default).
std::string text_of(const RendezvousState& s);
RendezvousState state_of(const std::string& text);

/// Whether `node` is in `nodes`; takes it out of `nodes` (wherever it is).
bool is_listed(const std::vector<std::string>& nodes, const std::string& node);
void unlist(std::vector<std::string>& nodes, const std::string& node);

}  // namespace ddp
