// Text values in a c10d store (which holds bytes): the rendezvous and the fault-tolerant group
// keep their small records as text, lists of names as words. Internal to libddp.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace ddp {

inline std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
inline std::string string_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

/// The value under `key`, or "" while there is none (get() would wait for it).
inline std::string text_at(c10d::Store& store, const std::string& key) {
  return store.check({key}) ? string_of(store.get(key)) : "";
}

/// Sets `key` to `desired` unless it has a value; returns the value it has then (the first
/// writer's: how members agree on one decision through the store).
inline std::string first_value(c10d::Store& store, const std::string& key,
                               const std::string& desired) {
  return string_of(store.compareSet(key, {}, bytes(desired)));
}

/// The words separated by `separator`.
inline std::string join_words(const std::vector<std::string>& words, const char* separator = " ") {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : separator) + w;
  return out;
}

/// Calls `field(key, value)` for each "key value" line of `text`: the form of the records the
/// rendezvous and the fault-tolerant group keep (a line without a space is a key with no value).
template <typename Field>
void for_each_field(const std::string& text, Field&& field) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t space = line.find(' ');
    field(line.substr(0, space), space == std::string::npos ? "" : line.substr(space + 1));
  }
}

/// The whitespace-separated words of `text`.
inline std::vector<std::string> split_words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace ddp
