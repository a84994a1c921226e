// What the ranks check of each other through the rendezvous store, apart from the backend (so
// a stuck backend cannot hide the answer): that every rank came, with the same world size; that
// every rank issues the same collective (debug_collectives); monitored barriers.
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/environment.h"
#include "ddp/error.h"
#include "ddp/process_group.h"
#include "message_text.h"
#include "process_group/rendezvous_wait.h"
#include "torch_compat.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += c10::str(i ? ", " : "", ranks[i]);
  return out;
}

// Waits until every one of `keys` is in the store; throws like Store::wait() after `timeout`.
// The other ranks usually post within a moment, so it polls for up to 5 ms first: LibTorch
// 2.14's FileStore (one node under launch()) looks only every 10 ms in wait(), which cost
// debug_collectives 17% of a step (docs/debugging.md).
void wait_for_keys(c10d::Store& store, const std::vector<std::string>& keys,
                   std::chrono::milliseconds timeout) {
  const auto poll_until = Clock::now() + std::chrono::milliseconds(5);
  while (Clock::now() < poll_until) {
    if (store.check(keys)) return;
    sched_yield();
  }
  store.wait(keys, timeout);
}

}  // namespace

void ProcessGroup::check_rendezvous(std::chrono::milliseconds timeout) {
  // Each rank announces itself with its world size; every rank then waits for all of them. A
  // rank started with another world size, or twice with the same rank, is named in the error.
  const std::string me = "rendezvous/rank/" + std::to_string(rank_);
  const int64_t copies = store_->add(me + "/count", 1);
  if (copies > 1) {
    throw DistributedError(
        c10::str("rank ", rank_, " joined twice; every process needs its own ", env::kRank));
  }
  const std::string mine = std::to_string(size_);
  store_->set(me, std::vector<uint8_t>(mine.begin(), mine.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back("rendezvous/rank/" + std::to_string(r));
  auto missing_ranks = [&] {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!store_->check({keys[size_t(r)]})) missing.push_back(r);
    }
    return missing;
  };
  // Rank 0 says every few seconds who is there and who is not.
  const bool everyone = wait_with_progress(
      [&] { return store_->check(keys); }, timeout,
      [&](double waited, double left) {
        if (rank_ != 0) return;
        const std::vector<int> missing = missing_ranks();
        std::fprintf(stderr,
                     "ddp: rendezvous: %d of %d ranks present, waiting for rank(s) %s: %.0f s so "
                     "far, %.0f s left\n",
                     size_ - int(missing.size()), size_, rank_list(missing).c_str(), waited, left);
      });
  // Asked rank by rank only when someone is missing: a store round trip per rank at start-up
  // otherwise, on every rank.
  const std::vector<int> missing = everyone ? std::vector<int>() : missing_ranks();
  for (int r = 0; r < size_; ++r) {
    const std::string& key = keys[size_t(r)];
    if (std::find(missing.begin(), missing.end(), r) != missing.end()) continue;
    const std::vector<uint8_t> theirs = store_->get(key);
    const std::string their_size(theirs.begin(), theirs.end());
    if (their_size != mine) {
      throw DistributedError(c10::str("rank ", rank_, " was started with world size ", size_,
                                      " but rank ", r, " with world size ", their_size,
                                      "; start every rank with the same ", env::kWorldSize));
    }
  }
  if (!missing.empty()) {
    throw TimeoutError(
        c10::str("rank ", rank_, ": rendezvous timed out after ", seconds(timeout),
                 " s waiting for rank(s) ", rank_list(missing), " of world size ", size_,
                 "; they did not start, cannot reach the master, or were given another "
                 "world size"));
  }
}

void ProcessGroup::check_same_collective(int64_t seq, const std::string& signature) {
  // Every rank posts its signature under the collective's number and reads the others'. Once a
  // rank has read them all for `seq`, every rank has finished reading `seq - 1`: its key can go.
  const std::string prefix = c10::str("debug/collective/", seq, "/");
  store_->set(c10::str(prefix, rank_), std::vector<uint8_t>(signature.begin(), signature.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(c10::str(prefix, r));
  try {
    wait_for_keys(*store_, keys, timeout_);
  } catch (const std::exception&) {
    std::vector<int> absent;
    for (int r = 0; r < size_; ++r)
      if (!store_->check({keys[size_t(r)]})) absent.push_back(r);
    throw TimeoutError(c10::str("rank ", rank_, ": collective #", seq, " (", signature,
                                "): rank(s) ", rank_list(absent), " did not issue it within ",
                                seconds(timeout_), " s (debug_collectives)"));
  }
  std::map<std::string, std::vector<int>> calls;
  for (int r = 0; r < size_; ++r) {
    const std::vector<uint8_t> theirs = store_->get(keys[size_t(r)]);
    calls[std::string(theirs.begin(), theirs.end())].push_back(r);
  }
  if (seq > 1) {
    try {
      store_->deleteKey(c10::str("debug/collective/", seq - 1, "/", rank_));
    } catch (const std::exception&) {
      // A store without deleteKey keeps the keys: a little memory, nothing else.
    }
  }
  if (calls.size() == 1) return;
  std::string list;
  for (const auto& [call, ranks] : calls)
    list += c10::str(list.empty() ? "" : "; ", "rank(s) ", rank_list(ranks), " issued ", call);
  throw DistributedError(c10::str("rank ", rank_, ": collective #", seq,
                                  " differs between ranks: ", list,
                                  ". Every rank must issue the same collectives, with the same "
                                  "shapes and dtypes, in the same order (debug_collectives)"));
}

void ProcessGroup::monitored_barrier(std::chrono::milliseconds timeout, const std::string& what) {
  // Rank 0 waits for every rank's arrival key, then posts the verdict every rank reads.
  const std::string prefix = unique_prefix("monitored_barrier");
  const std::string verdict_key = prefix + "verdict";
  store_->set(c10::str(prefix, rank_), std::vector<uint8_t>{1});
  std::string verdict;
  if (rank_ == 0) {
    const auto deadline = Clock::now() + timeout;
    std::vector<int> absent;
    for (int r = 1; r < size_; ++r) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        wait_for_keys(*store_, {c10::str(prefix, r)}, std::max(left, std::chrono::milliseconds(1)));
      } catch (const std::exception&) {
        absent.push_back(r);
      }
    }
    if (!absent.empty()) {
      verdict = c10::str(what, ": rank(s) ", rank_list(absent), " did not arrive within ",
                         seconds(timeout), " s");
    }
    store_->set(verdict_key, std::vector<uint8_t>(verdict.begin(), verdict.end()));
  } else {
    try {
      // Rank 0 answers within `timeout` of its own arrival; allow as long again for it to come.
      wait_for_keys(*store_, {verdict_key}, 2 * timeout);
    } catch (const std::exception&) {
      verdict = c10::str(what, ": rank(s) 0 did not arrive within ", seconds(2 * timeout), " s");
    }
    if (verdict.empty()) {
      const std::vector<uint8_t> text = store_->get(verdict_key);
      verdict.assign(text.begin(), text.end());
    }
  }
  if (!verdict.empty()) throw TimeoutError(c10::str("rank ", rank_, ": ", verdict));
}

}  // namespace ddp
