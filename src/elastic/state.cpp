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
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    const std::string key = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    std::istringstream words(value);
    std::vector<std::string> list;
    for (std::string w; words >> w;) list.push_back(w);
    if (key == "round") s.round = std::stoll(value);
    if (key == "complete") s.complete = value == "1";
    if (key == "deadline") s.deadline = std::stoll(value);
    if (key == "participants") s.participants = list;
    if (key == "waiting") s.waiting = list;
    if (key == "expected") s.expected = list;
    if (key == "previous") s.previous = list;
    if (key == "cause") s.cause = value;
    if (key == "closed") s.closed = value;
  }
  return s;
}

bool is_listed(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

void unlist(std::vector<std::string>& v, const std::string& x) {
  v.erase(std::remove(v.begin(), v.end(), x), v.end());
}

}  // namespace ddp
