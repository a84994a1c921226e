#include "ddp/data/download.h"

#include "ddp_build_config.h"

#if defined(DDP_HAVE_DOWNLOAD)
#include <archive.h>
#include <archive_entry.h>
#include <curl/curl.h>
#include <openssl/evp.h>
#endif
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <c10/util/StringUtil.h>

#include "ddp/atomic_file.h"
#include "ddp/data/cifar10.h"
#include "ddp/error.h"

namespace ddp::data {
namespace {

bool cifar_complete(const std::string& root) {
  for (Split split : {Split::kTrain, Split::kTest}) {
    for (const std::string& name : Cifar10Dataset::file_names(split)) {
      if (!path_exists(root + "/" + name)) return false;
    }
  }
  return true;
}

}  // namespace

#if !defined(DDP_HAVE_DOWNLOAD)

std::string md5_file(const std::string& path) {
  throw Error(
      c10::str("cannot hash ", path, ": this build has no OpenSSL (DDP_WITH_DOWNLOAD=OFF)"));
}

void download_cifar10(const std::string& dir, const DownloadOptions& options) {
  if (cifar_complete(dir + "/cifar-10-batches-bin")) return;
  throw InvalidArgument(
      c10::str("cannot download ", options.url(),
               ": this build has no libcurl, "
               "libarchive and OpenSSL (DDP_WITH_DOWNLOAD=OFF); fetch the archive "
               "yourself and unpack it into ",
               dir, ", or rebuild with them"));
}

#else

namespace {

using CurlPtr = std::unique_ptr<CURL, decltype(&curl_easy_cleanup)>;
// A deleter type rather than decltype(&std::fclose): glibc 2.41 gives fclose attributes that a
// function-pointer template argument drops (GCC 14 -Wignored-attributes).
struct CloseFile {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using FilePtr = std::unique_ptr<std::FILE, CloseFile>;
using ArchivePtr = std::unique_ptr<struct archive, decltype(&archive_read_free)>;
using ArchiveWriterPtr = std::unique_ptr<struct archive, decltype(&archive_write_free)>;

void fetch(const std::string& url, const std::string& dest, long timeout_seconds) {
  FilePtr out(std::fopen(dest.c_str(), "wb"));
  if (!out) throw IoError(c10::str("cannot create ", dest, ": ", std::strerror(errno)));
  CurlPtr curl(curl_easy_init(), &curl_easy_cleanup);
  if (!curl) throw IoError("libcurl: curl_easy_init failed");
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, out.get());
  curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT, timeout_seconds);
  const CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    throw IoError(
        c10::str("download of ", url, " failed: ", errbuf[0] ? errbuf : curl_easy_strerror(rc),
                 "; check the network, or fetch cifar-10-binary.tar.gz yourself and unpack it "
                 "into the data directory"));
  }
  if (std::fflush(out.get()) != 0) throw IoError(c10::str("cannot write ", dest, ": disk full?"));
}

void extract(const std::string& archive_path, const std::string& dest_dir) {
  ArchivePtr in(archive_read_new(), &archive_read_free);
  archive_read_support_filter_all(in.get());
  archive_read_support_format_all(in.get());
  if (archive_read_open_filename(in.get(), archive_path.c_str(), 1 << 16) != ARCHIVE_OK) {
    throw DataError(
        c10::str(archive_path, ": not a readable archive: ", archive_error_string(in.get())));
  }
  ArchiveWriterPtr out(archive_write_disk_new(), &archive_write_free);
  // Refuse ".." and links out, so a forged archive cannot write outside dest_dir.
  archive_write_disk_set_options(out.get(),
                                 ARCHIVE_EXTRACT_SECURE_NODOTDOT | ARCHIVE_EXTRACT_SECURE_SYMLINKS);
  struct archive_entry* entry = nullptr;
  while (true) {
    const int rc = archive_read_next_header(in.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK) {
      throw DataError(
          c10::str(archive_path, ": corrupt archive: ", archive_error_string(in.get())));
    }
    const std::string name = archive_entry_pathname(entry);
    if (name.empty() || name[0] == '/') {
      throw DataError(
          c10::str(archive_path, ": entry '", name, "' has an absolute path; refusing it"));
    }
    const std::string target = dest_dir + "/" + name;
    archive_entry_set_pathname(entry, target.c_str());
    if (archive_write_header(out.get(), entry) != ARCHIVE_OK) {
      throw IoError(c10::str("cannot unpack ", target, ": ", archive_error_string(out.get())));
    }
    const void* block = nullptr;
    size_t size = 0;
    la_int64_t offset = 0;
    int r;
    while ((r = archive_read_data_block(in.get(), &block, &size, &offset)) == ARCHIVE_OK) {
      if (archive_write_data_block(out.get(), block, size, offset) != ARCHIVE_OK) {
        throw IoError(c10::str("cannot write ", target, ": ", archive_error_string(out.get())));
      }
    }
    if (r != ARCHIVE_EOF) {
      throw DataError(
          c10::str(archive_path, ": truncated archive: ", archive_error_string(in.get())));
    }
    archive_write_finish_entry(out.get());
  }
}

void remove_tree(const std::string& path) {
  // Only ever called on the private staging directory this file created.
  const std::string cmd = "rm -rf '" + path + "'";
  if (std::system(cmd.c_str()) != 0)
    std::fprintf(stderr, "warning: could not remove %s\n", path.c_str());
}

}  // namespace

std::string md5_file(const std::string& path) {
  FilePtr in(std::fopen(path.c_str(), "rb"));
  if (!in) throw IoError(c10::str("cannot open ", path, ": ", std::strerror(errno)));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_md5(), nullptr);
  std::vector<unsigned char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), in.get())) > 0) {
    EVP_DigestUpdate(ctx.get(), buf.data(), n);
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &len);
  std::string hex;
  char two[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(two, sizeof two, "%02x", digest[i]);
    hex += two;
  }
  return hex;
}

void download_cifar10(const std::string& dir, const DownloadOptions& options) {
  const std::string root = dir + "/cifar-10-batches-bin";
  if (cifar_complete(root)) return;
  if (path_exists(root)) {
    throw IoError(c10::str(root, " exists but is incomplete; remove it and download again"));
  }
  make_directories(dir);
  std::string staging_template = dir + "/.cifar10-download-XXXXXX";
  std::vector<char> name(staging_template.begin(), staging_template.end());
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr) {
    throw IoError(
        c10::str("cannot create a staging directory in ", dir, ": ", std::strerror(errno)));
  }
  const std::string staging(name.data());
  try {
    const std::string archive = staging + "/cifar-10-binary.tar.gz";
    fetch(options.url(), archive, options.timeout_seconds());
    const std::string md5 = md5_file(archive);
    if (md5 != options.md5()) {
      throw DataError(c10::str("download of ", options.url(), " has MD5 ", md5, ", expected ",
                               options.md5(), "; the file is corrupt or not CIFAR-10 — try again"));
    }
    extract(archive, staging);
    if (!cifar_complete(staging + "/cifar-10-batches-bin")) {
      throw DataError(
          c10::str(options.url(), " does not contain cifar-10-batches-bin with all 6 batch files"));
    }
    if (::rename((staging + "/cifar-10-batches-bin").c_str(), root.c_str()) != 0) {
      throw IoError(
          c10::str("cannot move the unpacked data to ", root, ": ", std::strerror(errno)));
    }
  } catch (...) {
    remove_tree(staging);
    throw;
  }
  remove_tree(staging);
}

#endif  // DDP_HAVE_DOWNLOAD

}  // namespace ddp::data
