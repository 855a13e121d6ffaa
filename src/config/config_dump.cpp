// Writing a bound config tree back out: resolved YAML (values exact, strings quoted only when a
// YAML reader could misread them, docs as aligned comments) and the key reference printed by
// `unstuck config docs` (plain text or a Markdown table).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "unstuck/config/config.h"

namespace unstuck::config {
namespace {

// True when `s` reads back as the same string without quotes (and not as a bool, null or number).
bool is_plain_safe(const std::string& s) {
  if (s.empty()) return false;
  const auto c0 = static_cast<unsigned char>(s[0]);
  if (!std::isalpha(c0) && s[0] != '_' && s[0] != '/') return false;
  for (const char c : s) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == '/';
    if (!ok) return false;
  }
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* word : {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}) {
    if (lower == word) return false;
  }
  return true;
}

std::string quote(const std::string& s) {
  if (is_plain_safe(s)) return s;
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
      out += hex;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// A value as YAML text: scalars plain or quoted, lists in flow style.
struct ValueText {
  std::string operator()(bool b) const { return b ? "true" : "false"; }
  std::string operator()(int64_t i) const { return std::to_string(i); }
  std::string operator()(double d) const { return format_double(d); }
  std::string operator()(const std::string& s) const { return quote(s); }
  template <class T>
  std::string operator()(const std::vector<T>& values) const {
    std::string out = "[";
    for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + (*this)(values[i]);
    return out + "]";
  }
};

std::string value_text(const Field& field) {
  if (field.kind == Kind::section_list)
    return field.size() == 0 ? "[]" : "[" + std::to_string(field.size()) + " item(s)]";
  if (field.kind == Kind::mapping) return std::get<std::string>(field.get());  // JSON: YAML's flow form
  return std::visit(ValueText{}, field.get());
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

std::string type_name(const Field& field) {
  switch (field.kind) {
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return field.min == 0 ? "integer >= 0" : "integer";
    case Kind::real:
      return "number";
    case Kind::string:
      return "string";
    case Kind::enumeration:
      return join(field.choices, " | ");
    case Kind::int_list:
      return "list of integers";
    case Kind::real_list:
      return "list of numbers";
    case Kind::string_list:
      return "list of strings";
    case Kind::section:
      return "section";
    case Kind::section_list:
      return "list of sections";
    case Kind::mapping:
      return "mapping";
  }
  return "?";
}

// The doc as a comment; enums also list their allowed values.
std::string comment(const Field& field) {
  std::string doc = field.doc;
  std::replace(doc.begin(), doc.end(), '\n', ' ');
  if (field.kind == Kind::enumeration) doc += " [" + join(field.choices, " | ") + "]";
  return doc;
}

void emit_section(const Field& section, int indent, bool with_docs, std::string& out);

// A list of sections in block style: each item's keys as a section, its first line marked "- ".
void emit_section_list(const Field& list, int indent, bool with_docs, std::string& out) {
  for (std::size_t i = 0; i < list.size(); ++i) {
    std::string item;
    emit_section(list.element(i), indent + 2, with_docs, item);
    if (item.empty()) item = std::string(indent + 2, ' ') + "{}\n";  // a section without keys
    item.replace(std::size_t(indent), 2, "- ");
    out += item;
  }
}

void emit_section(const Field& section, int indent, bool with_docs, std::string& out) {
  std::vector<std::string> lines;
  std::size_t width = 0;
  for (const auto& child : section.children) {
    std::string line = std::string(indent, ' ') + child.name + ":";
    if (child.kind == Kind::section_list) {
      if (child.size() == 0) line += " []";
    } else if (child.kind != Kind::section) {
      line += " " + value_text(child);
    }
    width = std::max(width, line.size());
    lines.push_back(std::move(line));
  }
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const Field& child = section.children[i];
    if (indent == 0 && i > 0 && child.kind == Kind::section) out += "\n";  // between sections
    out += lines[i];
    if (with_docs) out += std::string(width - lines[i].size() + 2, ' ') + "# " + comment(child);
    out += "\n";
    if (child.kind == Kind::section) emit_section(child, indent + 2, with_docs, out);
    if (child.kind == Kind::section_list) emit_section_list(child, indent + 2, with_docs, out);
  }
}

// Calls fn(dotted_key, field) for every leaf, depth first in visit() order; a list of sections is
// a leaf of its own (`reward.terms`) followed by a default item's leaves (`reward.terms[].weight`).
template <class Fn>
void for_each_leaf(const Field& section, const std::string& prefix, Fn&& fn) {
  for (const auto& child : section.children) {
    const std::string key = prefix.empty() ? child.name : prefix + "." + child.name;
    if (child.kind == Kind::section) {
      for_each_leaf(child, key, fn);
    } else {
      fn(key, child);
    }
    if (child.kind == Kind::section_list)
      child.with_default_element([&](const Field& element) { for_each_leaf(element, key + "[]", fn); });
  }
}

}  // namespace

std::string to_yaml(const Field& root, bool with_docs) {
  std::string out;
  emit_section(root, 0, with_docs, out);
  return out;
}

std::string docs_text(const Field& root) {
  std::string out;
  for_each_leaf(root, "", [&out](const std::string& key, const Field& field) {
    out += key + " (" + type_name(field) + ", default: " + value_text(field) + ")\n";
    out += "    " + field.doc + "\n";
  });
  return out;
}

std::string docs_markdown(const Field& root) {
  std::string out = "| key | type | default | description |\n|---|---|---|---|\n";
  for_each_leaf(root, "", [&out](const std::string& key, const Field& field) {
    std::string type = type_name(field);
    if (field.kind == Kind::enumeration) type = "`" + join(field.choices, "`, `") + "`";
    std::string doc;  // a '|' in a doc ("constant | warmup") would end the cell: escaped
    for (char c : field.doc) doc += c == '|' ? std::string("\\|") : std::string(1, c);
    out += "| `" + key + "` | " + type + " | `" + value_text(field) + "` | " + doc + " |\n";
  });
  return out;
}

}  // namespace unstuck::config
