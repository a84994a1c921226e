// SplitMix64's mixing function: a well-spread 64-bit value from any 64-bit input, for seeds
// derived from a sample's coordinates (the in-memory transforms, the loader's replacements of
// bad samples).
#pragma once

#include <cstdint>

namespace ddp::data {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace ddp::data
