#include "elastic/state.h"

#include <algorithm>
#include <sstream>

#include "process_group/store_text.h"

namespace ddp {

std::string text_of(const RendezvousState& s) {
  std::ostringstream out;
  out << "round " << s.round << "\ncomplete " << s.complete << "\ndeadline " << s.deadline
      << "\nparticipants " << join_words(s.participants) << "\nwaiting " << join_words(s.waiting)
      << "\nexpected " << join_words(s.expected) << "\nprevious " << join_words(s.previous)
      << "\ncause " << s.cause << "\nclosed " << s.closed << "\n";
  return out.str();
}

RendezvousState state_of(const std::string& text) {
  RendezvousState s;
  for_each_field(text, [&s](const std::string& key, const std::string& value) {
    if (key == "round") s.round = std::stoll(value);
    if (key == "complete") s.complete = value == "1";
    if (key == "deadline") s.deadline = std::stoll(value);
    if (key == "participants") s.participants = split_words(value);
    if (key == "waiting") s.waiting = split_words(value);
    if (key == "expected") s.expected = split_words(value);
    if (key == "previous") s.previous = split_words(value);
    if (key == "cause") s.cause = value;
    if (key == "closed") s.closed = value;
  });
  return s;
}

bool is_listed(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

void unlist(std::vector<std::string>& v, const std::string& x) {
  v.erase(std::remove(v.begin(), v.end(), x), v.end());
}

}  // namespace ddp
