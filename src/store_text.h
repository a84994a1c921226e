// Text values in a c10d store (which holds bytes): the rendezvous and the fault-tolerant group
// keep their small records as text. Internal to libddp.
#pragma once

#include <cstdint>
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

}  // namespace ddp
