// Downloading CIFAR-10: fetch the official binary archive with libcurl,
// check its MD5, unpack it with libarchive and move the result into place only when everything
// succeeded.
#pragma once

#include <string>

#include <torch/arg.h>

namespace ddp::data {

/// Where CIFAR-10 comes from and what it must hash to. Tests point `url` at a file:// archive.
struct DownloadOptions {
  TORCH_ARG(std::string, url) = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz";
  TORCH_ARG(std::string, md5) = "c32a1d4ab5d03f1284b67883e8d87530";
  TORCH_ARG(long, timeout_seconds) = 600;
};

/// Makes `dir`/cifar-10-batches-bin exist: does nothing when it is already complete, otherwise
/// downloads, verifies and unpacks. Throws IoError (network, disk) or DataError (checksum,
/// archive) saying what to do; a failed download leaves no partial directory behind.
void download_cifar10(const std::string& dir, const DownloadOptions& options = {});

/// The lowercase hex MD5 of a file's contents.
std::string md5_file(const std::string& path);

}  // namespace ddp::data
