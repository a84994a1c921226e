// What ddp::Join needs of a Reducer beyond its public face (ddp/reducer.h). Users never call
// these, so they live under src/; the uneven-inputs protocol itself is join.cpp's alone.
#pragma once

#include <functional>

#include "ddp/reducer.h"

namespace ddp {

class ProcessGroup;

namespace detail {

struct ReducerInternals {
  /// Called at the start of every forward that communicates (it synchronises gradients,
  /// broadcasts buffers or rebuilds the buckets), before any of that, with whether it
  /// synchronises gradients.
  using ForwardNotice = std::function<void(bool sync_gradients)>;
  /// Installs `notice` (empty: removes it).
  static void set_forward_notice(Reducer& reducer, ForwardNotice notice);
  static bool has_forward_notice(const Reducer& reducer);

  /// A joined rank's part in one step of the others: the bucket rebuild and buffer broadcast of
  /// their forward and, when `sync_gradients`, every bucket's reduction with zero gradients
  /// (through the communication hook, in bucket order). Afterwards .grad holds the gradients
  /// averaged over all ranks, with zeros from this one.
  static void shadow_step(Reducer& reducer, bool sync_gradients);
  /// Copies rank `root`'s parameters and buffers to every rank (a collective).
  static void broadcast_module_states(Reducer& reducer, int root);
  static ProcessGroup& group(Reducer& reducer);
};

}  // namespace detail
}  // namespace ddp
