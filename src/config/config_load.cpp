// Loading YAML into a bound config tree (files, strings, `a.b.c=value` overrides) with strict type
// checking. Every error names where the bad input came from (file:line or the override text), the
// dotted key, what was expected and what was found, and suggests the closest key for typos.
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "unstuck/common/error.h"
#include "unstuck/config/config.h"

namespace unstuck::config {
namespace {

// Where the YAML being applied came from, and the tree it goes into (for key suggestions).
struct Context {
  const Field* root = nullptr;
  std::string source;  // file name, or the override text
  bool is_override = false;
  YAML::Mark key_mark = YAML::Mark::null_mark();  // the key being applied: where an empty value is

  std::string at(const YAML::Mark& mark) const {
    if (is_override) return "override '" + source + "': ";
    if (mark.is_null()) return source + ": ";
    return source + ":" + std::to_string(mark.line + 1) + ": ";
  }
};

[[noreturn]] void fail(const Context& ctx, const YAML::Node& node, const std::string& what) {
  throw UserError(ctx.at(node.IsNull() ? ctx.key_mark : node.Mark()) + what);
}

std::string join_key(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

std::vector<std::string> child_names(const Field& section) {
  std::vector<std::string> names;
  for (const auto& child : section.children) names.push_back(child.name);
  return names;
}

// How a YAML node looks, for the "got ..." part of errors.
std::string describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "an empty value";
  }
}

// Optimal-string-alignment distance: edits, where swapping two neighbours counts as one edit.
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The candidate closest to `word`, if it is close enough to be a plausible typo.
std::optional<std::string> closest(const std::string& word, const std::vector<std::string>& candidates) {
  const std::size_t limit = word.size() <= 3 ? 1 : std::max<std::size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

// Dotted path of the first field called `name` anywhere in the tree ("lr" -> "optim.lr").
std::optional<std::string> find_anywhere(const Field& section, const std::string& name, const std::string& prefix) {
  for (const auto& child : section.children) {
    if (child.name == name) return join_key(prefix, name);
  }
  for (const auto& child : section.children) {
    if (child.kind != Kind::section) continue;
    if (auto found = find_anywhere(child, name, join_key(prefix, child.name))) return found;
  }
  return std::nullopt;
}

std::string unknown_key(const Context& ctx, const Field& section, const std::string& prefix, const std::string& name) {
  const std::string message = "unknown key '" + join_key(prefix, name) + "'";
  const auto names = child_names(section);
  if (auto best = closest(name, names)) return message + " (did you mean '" + join_key(prefix, *best) + "'?)";
  if (auto elsewhere = find_anywhere(*ctx.root, name, "")) {
    return message + " (did you mean '" + *elsewhere + "'?)";
  }
  const std::string where = prefix.empty() ? "" : " in '" + prefix + "'";
  return message + " (valid keys" + where + ": " + join(names, ", ") + ")";
}

const Field* find_child(const Field& section, const std::string& name) {
  for (const auto& child : section.children) {
    if (child.name == name) return &child;
  }
  return nullptr;
}

std::string expected(const Field& field, Kind kind) {
  switch (kind) {
    case Kind::boolean:
      return "expected true or false";
    case Kind::integer:
      return "expected an integer";
    case Kind::real:
      return "expected a number";
    case Kind::string:
      return "expected a string";
    case Kind::enumeration:
      return "expected one of " + join(field.choices, " | ");
    case Kind::int_list:
      return "expected a list of integers";
    case Kind::real_list:
      return "expected a list of numbers";
    case Kind::string_list:
      return "expected a list of strings";
    case Kind::section:
      return "expected a mapping with keys " + join(child_names(field), ", ");
    case Kind::mapping:
      return "expected a mapping (name: value, ...)";
    case Kind::section_list: {
      std::string keys;
      field.with_default_element([&keys](const Field& element) { keys = join(child_names(element), ", "); });
      return "expected a list of mappings, each with keys " + keys;
    }
  }
  return "unexpected value";
}

std::optional<bool> parse_bool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

// Decimal integer; `overflow` is set when the text is an integer too large for int64.
std::optional<int64_t> parse_int(std::string_view s, bool& overflow) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || end != s.data() + s.size()) return std::nullopt;
  overflow = ec == std::errc::result_out_of_range;
  if (ec != std::errc()) return std::nullopt;
  return value;
}

// A YAML number: decimal or scientific, or .inf / -.inf / .nan (YAML's spellings).
std::optional<double> parse_real(std::string_view s) {
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf") return kInf;
  if (s == "-.inf" || s == "-.Inf" || s == "-.INF") return -kInf;
  if (s == ".nan" || s == ".NaN" || s == ".NAN") return std::numeric_limits<double>::quiet_NaN();
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

Value integer_value(const Field& field, const YAML::Node& node, const std::string& key, const Context& ctx) {
  bool overflow = false;
  const auto value = parse_int(node.Scalar(), overflow);
  if (value && *value >= field.min && *value <= field.max) return *value;
  if (!value && !overflow) fail(ctx, node, key + ": expected an integer, got " + describe(node));
  fail(ctx, node,
       key + ": expected an integer in [" + std::to_string(field.min) + ", " + std::to_string(field.max) + "], got " +
           describe(node));
}

// Converts one scalar for a value of `kind` (the element kind, for lists); throws on mismatch.
Value scalar_value(const Field& field, Kind kind, const YAML::Node& node, const std::string& key, const Context& ctx) {
  const auto bad = [&](const std::string& extra) {
    fail(ctx, node, key + ": " + expected(field, kind) + ", got " + describe(node) + extra);
  };
  if (!node.IsScalar()) bad("");
  const std::string& text = node.Scalar();
  if (kind == Kind::string) return text;
  if (kind == Kind::enumeration) {
    if (std::find(field.choices.begin(), field.choices.end(), text) != field.choices.end()) return text;
    const auto best = closest(text, field.choices);
    bad(best ? " (did you mean '" + *best + "'?)" : "");
  }
  if (node.Tag() == "!") bad(", a quoted string (remove the quotes)");
  if (kind == Kind::integer) return integer_value(field, node, key, ctx);
  if (kind == Kind::boolean) {
    if (const auto value = parse_bool(text)) return *value;
  } else if (const auto value = parse_real(text)) {
    return *value;
  }
  bad("");
  return Value{};
}

template <class T>
Value list_value(const Field& field, Kind elem, const YAML::Node& node, const std::string& key, const Context& ctx) {
  std::vector<T> values;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const std::string elem_key = key + "[" + std::to_string(i) + "]";
    values.push_back(std::get<T>(scalar_value(field, elem, node[i], elem_key, ctx)));
  }
  return values;
}

// A YAML value as JSON: mappings with name keys, sequences, and scalars as YAML 1.2's core schema
// types them (null, bools, integers, floats; quoted text and anything else a string).
nlohmann::json json_of(const YAML::Node& node, const std::string& key, const Context& ctx) {
  if (node.IsNull()) return nullptr;
  if (node.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& entry : node) {
      const YAML::Node name = entry.first;
      if (!name.IsScalar()) fail(ctx, name, key + ": keys must be names, got " + describe(name));
      if (out.contains(name.Scalar())) fail(ctx, name, "duplicate key '" + join_key(key, name.Scalar()) + "'");
      out[name.Scalar()] = json_of(entry.second, join_key(key, name.Scalar()), ctx);
    }
    return out;
  }
  if (node.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (std::size_t i = 0; i < node.size(); ++i)
      out.push_back(json_of(node[i], key + "[" + std::to_string(i) + "]", ctx));
    return out;
  }
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted
  if (text == "~" || text == "null" || text == "Null" || text == "NULL") return nullptr;
  if (const auto b = parse_bool(text)) return *b;
  bool overflow = false;
  if (const auto i = parse_int(text, overflow)) return *i;
  if (const auto x = parse_real(text)) {
    if (!std::isfinite(*x))
      fail(ctx, node, key + ": " + text + " is not a finite number (JSON, and so the value handed on, has none)");
    return *x;
  }
  return text;
}

void apply_leaf(const Field& field, const YAML::Node& node, const std::string& key, const Context& ctx) {
  if (field.kind == Kind::mapping) {
    if (!node.IsMap() && !node.IsNull())
      fail(ctx, node, key + ": " + expected(field, field.kind) + ", got " + describe(node));
    return field.set(node.IsNull() ? std::string("{}") : json_of(node, key, ctx).dump());
  }
  const bool is_list = field.kind == Kind::int_list || field.kind == Kind::real_list || field.kind == Kind::string_list;
  if (!is_list) return field.set(scalar_value(field, field.kind, node, key, ctx));
  if (!node.IsSequence()) fail(ctx, node, key + ": " + expected(field, field.kind) + ", got " + describe(node));
  switch (field.kind) {
    case Kind::int_list:
      return field.set(list_value<int64_t>(field, Kind::integer, node, key, ctx));
    case Kind::real_list:
      return field.set(list_value<double>(field, Kind::real, node, key, ctx));
    default:
      return field.set(list_value<std::string>(field, Kind::string, node, key, ctx));
  }
}

void apply_node(const Field& field, const YAML::Node& node, const std::string& key, const Context& ctx);

// A list of sections is replaced as a whole: one default element per item, then the item's keys.
void apply_section_list(const Field& field, const YAML::Node& node, const std::string& key, const Context& ctx) {
  if (!node.IsSequence()) fail(ctx, node, key + ": " + expected(field, field.kind) + ", got " + describe(node));
  field.resize(node.size());
  for (std::size_t i = 0; i < node.size(); ++i) {
    const std::string item = key + "[" + std::to_string(i) + "]";
    const YAML::Node entry = node[i];
    if (!entry.IsMap() && !entry.IsNull())
      fail(ctx, entry, item + ": " + expected(field, field.kind) + ", got " + describe(entry));
    apply_node(field.element(i), entry, item, ctx);
  }
}

// Applies `node` to `field` (dotted name `key`); sections recurse key by key.
void apply_node(const Field& field, const YAML::Node& node, const std::string& key, const Context& ctx) {
  if (field.kind == Kind::section_list) return apply_section_list(field, node, key, ctx);
  if (field.kind != Kind::section) return apply_leaf(field, node, key, ctx);
  if (node.IsNull()) return;  // `precision:` with nothing under it changes nothing
  const std::string name = key.empty() ? "top level" : key;
  if (!node.IsMap()) fail(ctx, node, name + ": " + expected(field, Kind::section) + ", got " + describe(node));
  std::set<std::string> seen;
  for (const auto& entry : node) {
    const YAML::Node key_node = entry.first;  // a copy: yaml-cpp's iterator hands out temporaries
    if (!key_node.IsScalar()) fail(ctx, key_node, name + ": keys must be names, got " + describe(key_node));
    const std::string child_name = key_node.Scalar();
    if (!seen.insert(child_name).second) fail(ctx, key_node, "duplicate key '" + join_key(key, child_name) + "'");
    const Field* child = find_child(field, child_name);
    if (!child) fail(ctx, key_node, unknown_key(ctx, field, key, child_name));
    Context child_ctx = ctx;
    child_ctx.key_mark = key_node.Mark();
    apply_node(*child, entry.second, join_key(key, child_name), child_ctx);
  }
}

}  // namespace

void load_yaml_file(const Field& root, const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw UserError("config file not found: " + path.string());
  if (std::filesystem::is_directory(path, ec)) {
    throw UserError("config path " + path.string() + " is a folder; give a YAML file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("cannot read config file " + path.string() + " (check its permissions)");
  // Read at most kMaxConfigBytes (+1 to detect more): /dev/zero or a huge file by mistake would
  // otherwise be read forever.
  constexpr std::size_t kMaxConfigBytes = std::size_t(16) << 20;
  std::string text(kMaxConfigBytes + 1, '\0');
  in.read(text.data(), std::streamsize(text.size()));
  text.resize(std::size_t(in.gcount()));
  if (text.size() > kMaxConfigBytes)
    throw UserError("config file " + path.string() + " is larger than " + std::to_string(kMaxConfigBytes >> 20) +
                    " MiB; give a YAML config file");
  load_yaml_string(root, text, path.string());
}

void load_yaml_string(const Field& root, const std::string& text, const std::string& source) {
  const Context ctx{&root, source, false};
  // YAML is printable text: a NUL or another control byte would reach yaml-cpp, which shows it as
  // something else ("a\0b" as 'a\x08 '), so it is refused where it is.
  for (std::size_t i = 0, line = 1, column = 1; i < text.size(); ++i, ++column) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      ++line;
      column = 0;
    } else if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      throw UserError(source + ":" + std::to_string(line) + ":" + std::to_string(column) + ": control byte 0x" +
                      kHex[c >> 4] + kHex[c & 15] + (c == 0 ? " (NUL)" : "") +
                      " in the config; a YAML config is printable text");
    }
  }
  YAML::Node node;
  try {
    node = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {  // yaml-cpp's own depth guard; its message says "bad file"
    throw UserError(ctx.at(e.mark) + "invalid YAML: nested deeper than " + std::to_string(e.depth()) + " levels");
  } catch (const YAML::Exception& e) {
    throw UserError(ctx.at(e.mark) + "invalid YAML: " + e.msg);
  }
  apply_node(root, node, "", ctx);
}

void apply_override(const Field& root, const std::string& text) {
  const Context ctx{&root, text, true};
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw UserError(ctx.at(YAML::Mark::null_mark()) + "expected key=value, e.g. optim.lr=3e-6");
  }
  const std::string key = text.substr(0, eq);
  YAML::Node node;
  try {
    node = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw UserError(ctx.at(e.mark) + "invalid YAML value: " + e.msg);
  }
  const Field* field = &root;
  std::string prefix;
  std::vector<std::unique_ptr<Field>> elements;  // list items named by `list[i]`, alive until applied
  std::istringstream parts(key);
  for (std::string part; std::getline(parts, part, '.');) {
    if (field->kind != Kind::section) {
      throw UserError(ctx.at(node.Mark()) + "unknown key '" + key + "' ('" + prefix + "' is a value, not a section)");
    }
    // `reward.terms[1].weight=0.5`: item 1 of an existing list of sections.
    std::optional<std::size_t> index;
    const std::size_t open = part.find('[');
    if (open != std::string::npos && open > 0 && part.back() == ']') {
      bool overflow = false;
      const auto i = parse_int(std::string_view(part).substr(open + 1, part.size() - open - 2), overflow);
      if (!i || *i < 0) throw UserError(ctx.at(node.Mark()) + "'" + part + "': expected name[index], e.g. terms[0]");
      index = std::size_t(*i);
      part.resize(open);
    }
    const Field* child = find_child(*field, part);
    if (!child) throw UserError(ctx.at(node.Mark()) + unknown_key(ctx, *field, prefix, part));
    prefix = join_key(prefix, part);
    field = child;
    if (!index) continue;
    if (field->kind != Kind::section_list)
      throw UserError(ctx.at(node.Mark()) + "'" + prefix + "' is not a list of sections; it takes no [index]");
    if (*index >= field->size())
      throw UserError(ctx.at(node.Mark()) + prefix + " has " + std::to_string(field->size()) + " item(s), so [" +
                      std::to_string(*index) + "] is not one (set the whole list: " + prefix + "=[{...}, ...])");
    elements.push_back(std::make_unique<Field>(field->element(*index)));
    field = elements.back().get();
    prefix += "[" + std::to_string(*index) + "]";
  }
  apply_node(*field, node, key, ctx);
}

}  // namespace unstuck::config
