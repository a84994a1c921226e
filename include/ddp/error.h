// The exceptions ddp.cpp throws. A user mistake or a bad file is a ddp::Error whose message says
// what was wrong, where (file, option, rank) and what to do, in the library's own terms (its
// options' names); a program adds its flags' names. Subclasses let callers and tests tell the
// kinds apart.
#pragma once

#include <stdexcept>
#include <string>

namespace ddp {

/// Base of every error ddp.cpp reports to its user.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A flag, option, environment variable or argument with a value that cannot be used.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

/// A file that is missing, unreadable or unwritable.
class IoError : public Error {
 public:
  using Error::Error;
};

/// A file that exists but whose contents are wrong (bad magic, size, label, truncation).
class DataError : public Error {
 public:
  using Error::Error;
};

/// A wait (rendezvous, collective, child process) that ran past its limit.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// Ranks that disagree (world size, model shape) or a peer that failed.
class DistributedError : public Error {
 public:
  using Error::Error;
};

/// A collective that failed because another rank exited or stopped answering: a symptom on this
/// rank, whose cause is on another (exit with kExitPeerFailure from launch.h to say so).
class PeerFailure : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

}  // namespace ddp
