#include "config_file.h"

#include <algorithm>
#include <charconv>
#include <map>

#include "ddp_build_config.h"

#if defined(DDP_HAVE_TOML)
#include <toml++/toml.h>

#include <c10/util/StringUtil.h>
#endif

#include "ddp/error.h"

namespace ddp::train {

#if !defined(DDP_HAVE_TOML)

std::vector<std::string> flags_from_config_file(
    const std::string& path, const std::function<FlagArity(const std::string&)>&) {
  throw InvalidArgument(c10::str("--config ", path,
                                 ": this ddp-train was built without TOML "
                                 "support (DDP_WITH_TOML=OFF; Debian: libtomlplusplus-dev); give "
                                 "the flags on the command line"));
}

#else

namespace {

// The shortest text that reads back as the same double (0.05, not 0.050000000000000003).
std::string number_text(double value) {
  char text[64];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}

// A value of a flag that takes one, as the command line would spell it.
std::string value_text(const toml::node& node, const std::string& where) {
  if (auto s = node.as_string()) return s->get();
  if (auto i = node.as_integer()) return std::to_string(i->get());
  if (auto f = node.as_floating_point()) return number_text(f->get());
  throw InvalidArgument(c10::str(where, ": the value must be a string or a number"));
}

}  // namespace

std::vector<std::string> flags_from_config_file(
    const std::string& path, const std::function<FlagArity(const std::string&)>& arity) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    if (at.line == 0) {  // the file itself could not be read
      throw InvalidArgument(
          c10::str("--config ", path, ": cannot read it (", e.description(), ")"));
    }
    throw InvalidArgument(c10::str("--config ", path, ":", at.line, ":", at.column, ": ",
                                   e.description(), " (TOML: key = value per line)"));
  }
  // Keys by line, so a mistake is reported in the file's order and the flags keep it too.
  std::vector<std::pair<const toml::key*, const toml::node*> > entries;
  for (auto&& [key, node] : table) entries.emplace_back(&key, &node);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.first->source().begin.line < b.first->source().begin.line;
  });
  std::vector<std::string> args;
  std::map<std::string, std::string> seen;  // flag → the key that set it
  for (const auto& [key, node] : entries) {
    const std::string where =
        c10::str("--config ", path, ":", key->source().begin.line, ": '", key->str(), "'");
    std::string name = "--" + std::string(key->str());
    std::replace(name.begin(), name.end(), '_', '-');  // batch_size is --batch-size
    if (name == "--config")
      throw InvalidArgument(c10::str(where, ": a config file cannot include another"));
    const FlagArity kind = arity(name);
    if (kind == FlagArity::kUnknown || name == "--help") {
      throw InvalidArgument(c10::str(where,
                                     ": unknown key; the keys are the flags of ddp-train "
                                     "--help without the dashes (",
                                     name.substr(2), " is not one)"));
    }
    if (!seen.emplace(name, std::string(key->str())).second) {
      throw InvalidArgument(c10::str(where, ": given twice (also as '", seen[name], "')"));
    }
    if (kind == FlagArity::kSwitch) {
      auto on = node->as_boolean();
      if (!on) throw InvalidArgument(c10::str(where, ": a switch takes true or false"));
      if (on->get()) args.push_back(name);
      continue;
    }
    args.push_back(name);
    args.push_back(value_text(*node, where));
  }
  return args;
}

#endif  // DDP_HAVE_TOML

}  // namespace ddp::train
