#include "ddp/data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include <c10/util/StringUtil.h>

#include "ddp/error.h"

namespace ddp::data {
namespace fs = std::filesystem;
namespace {

// The extensions torchvision takes that ddp.cpp decodes, and those it takes but does not decode,
// which are refused while indexing rather than failing mid-epoch.
const std::vector<std::string> kDecoded = {".jpg", ".jpeg", ".png"};
const std::vector<std::string> kNotDecoded = {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

// Whether `lowered` (a file name in lower case) ends in one of `extensions`.
bool ends_with_any(const std::string& lowered, const std::vector<std::string>& extensions) {
  for (const std::string& e : extensions) {
    if (lowered.size() >= e.size() && lowered.compare(lowered.size() - e.size(), e.size(), e) == 0)
      return true;
  }
  return false;
}

// Whether the entry is a directory, following symlinks, as os.scandir's entry.is_dir(): from
// the type the directory listing gives, so only a symlink costs a stat() (a million files
// index in seconds).
bool is_dir_following_links(const fs::directory_entry& entry) {
  std::error_code error;
  return entry.is_directory(error);
}

// os.walk(dir, followlinks=True), then sorted: directory path -> its non-directory entries.
// A directory that is its own ancestor through a symlink is not entered again (os.walk would
// recurse until the path is too long); two links to one directory are both walked, as os.walk
// does; an unreadable sub-directory is left out, as os.walk's default does.
void walk(const fs::path& dir, std::map<std::string, std::vector<std::string>>& files,
          std::set<std::pair<dev_t, ino_t>>& ancestors) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !ancestors.insert({st.st_dev, st.st_ino}).second) return;
  std::error_code error;
  fs::directory_iterator it(dir, error), end;
  if (error) return;
  std::vector<std::string>& names = files[dir.string()];
  std::vector<fs::path> subdirs;
  for (; it != end; it.increment(error)) {
    if (error) break;
    if (is_dir_following_links(*it)) {
      subdirs.push_back(it->path());
    } else {
      names.push_back(it->path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  for (const fs::path& sub : subdirs) walk(sub, files, ancestors);
  ancestors.erase({st.st_dev, st.st_ino});
}

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& item : items) s += (s.empty() ? "" : ", ") + item;
  return s;
}

}  // namespace

const std::vector<std::string>& image_folder_extensions() {
  static const std::vector<std::string> all = [] {
    std::vector<std::string> v = kDecoded;
    v.insert(v.end(), kNotDecoded.begin(), kNotDecoded.end());
    return v;
  }();
  return all;
}

ImageFolder::ImageFolder(const std::string& root) : root_(root) {
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
  std::error_code error;
  fs::directory_iterator it(root, error), end;
  if (error) {
    throw IoError(c10::str("image folder ", root, ": ", error.message(),
                           " (it should hold one sub-directory of images per class)"));
  }
  for (; it != end; it.increment(error)) {
    if (error) throw IoError(c10::str("image folder ", root, ": ", error.message()));
    if (is_dir_following_links(*it)) classes_.push_back(it->path().filename().string());
  }
  std::sort(classes_.begin(), classes_.end());
  if (classes_.empty()) {
    throw DataError(c10::str("image folder ", root,
                             ": no class folder in it (ImageFolder expects ROOT/<class>/<image>)"));
  }
  offsets_.push_back(0);
  std::vector<std::string> empty;
  for (size_t c = 0; c < classes_.size(); ++c) {
    const size_t before = labels_.size();
    add_class(int(c));
    if (labels_.size() == before) empty.push_back(classes_[c]);
  }
  if (!empty.empty()) {
    throw DataError(c10::str("image folder ", root, ": no image in the class folder(s) ",
                             join(empty), " (supported extensions: ", join(kDecoded),
                             "); remove the folder or add images to it"));
  }
}

void ImageFolder::add_class(int label) {
  const fs::path class_dir = fs::path(root_) / classes_[size_t(label)];
  std::map<std::string, std::vector<std::string>> files;
  std::set<std::pair<dev_t, ino_t>> ancestors;
  walk(class_dir, files, ancestors);
  const size_t prefix = root_.size() + (root_.back() == '/' ? 0 : 1);  // paths below root
  for (const auto& [dir, names] : files) {
    for (const std::string& name : names) {
      const std::string lowered = lower(name);  // torchvision's extensions: any case
      if (ends_with_any(lowered, kNotDecoded)) {
        throw DataError(c10::str(dir, "/", name, ": this image format is not decoded by ddp.cpp (",
                                 join(kDecoded),
                                 " are); convert such files to PNG or JPEG, or "
                                 "move them out of ",
                                 root_));
      }
      if (!ends_with_any(lowered, kDecoded)) continue;
      paths_ += (fs::path(dir) / name).string().substr(prefix);
      offsets_.push_back(paths_.size());
      labels_.push_back(int32_t(label));
    }
  }
}

std::string ImageFolder::path(size_t index) const {
  return (fs::path(root_) /
          paths_.substr(size_t(offsets_[index]), size_t(offsets_[index + 1] - offsets_[index])))
      .string();
}

size_t ImageFolder::index_bytes() const {
  return paths_.size() + offsets_.size() * sizeof(uint64_t) + labels_.size() * sizeof(int32_t);
}

std::string ImageFolder::description() const {
  return c10::str("ImageFolder ", root_, ": ", size(), " images of ", classes_.size(), " classes");
}

}  // namespace ddp::data
