// Jinja values as Python sees them: truthiness, equality, str() / repr(), and json.dumps() with
// transformers' tojson settings (ensure_ascii off, ", " and ": " separators, keys unsorted).
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tokenizer/jinja_ast.h"

namespace unstuck::tokenizer::jinja {
namespace {

// Python's repr() of a float: the shortest text that reads back to the same double.
std::string float_text(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string s = buf;
  const auto e = s.find('e');
  if (e != std::string::npos) {
    // Python writes 1e+16 and 1e-05 as C does, but uses fixed notation up to 1e16.
    const int exponent = std::atoi(s.c_str() + e + 1);
    if (exponent < 16 && exponent >= -4) {
      std::snprintf(buf, sizeof buf, "%.17f", x);
      s = buf;
      while (s.back() == '0') s.pop_back();
      if (s.back() == '.') s.pop_back();
    } else {
      return s;
    }
  }
  if (s.find('.') == std::string::npos) s += ".0";
  return s;
}

std::string quoted_repr(const std::string& s) {
  // Python picks single quotes unless the text holds one and no double quote.
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (const char c : s) {
    if (c == q || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else
      out += c;
  }
  return out + q;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

}  // namespace

const Value* Value::find(const std::string& key) const {
  if (kind != Kind::object) return nullptr;
  for (const auto& [k, v] : *obj)
    if (k == key) return &v;
  return nullptr;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      Array a;
      for (const auto& e : j) a.push_back(from_json(e));
      return Value::array(std::move(a));
    }
    case nlohmann::ordered_json::value_t::object: {
      Object o;
      for (auto it = j.begin(); it != j.end(); ++it) o.emplace_back(it.key(), from_json(it.value()));
      return Value::object(std::move(o));
    }
    default:
      return Value::none();
  }
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return false;
    case Value::Kind::boolean:
      return v.b;
    case Value::Kind::integer:
      return v.i != 0;
    case Value::Kind::number:
      return v.d != 0.0;
    case Value::Kind::string:
      return !v.s.empty();
    case Value::Kind::array:
      return !v.arr->empty();
    case Value::Kind::object:
      return v.is_namespace || !v.obj->empty();
  }
  return false;
}

bool equal(const Value& a, const Value& b) {
  using K = Value::Kind;
  const auto numeric = [](const Value& v) { return v.is(K::boolean) || v.is(K::integer) || v.is(K::number); };
  const auto as_double = [](const Value& v) {
    return v.is(K::number) ? v.d : v.is(K::integer) ? double(v.i) : double(v.b);
  };
  if (numeric(a) && numeric(b)) {
    if (a.is(K::number) || b.is(K::number)) return as_double(a) == as_double(b);
    return (a.is(K::integer) ? a.i : int64_t(a.b)) == (b.is(K::integer) ? b.i : int64_t(b.b));
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case K::undefined:
    case K::none:
      return true;
    case K::string:
      return a.s == b.s;
    case K::array:
      if (a.arr->size() != b.arr->size()) return false;
      for (size_t k = 0; k < a.arr->size(); ++k)
        if (!equal((*a.arr)[k], (*b.arr)[k])) return false;
      return true;
    case K::object:
      if (a.is_namespace || b.is_namespace) return a.obj == b.obj;
      if (a.obj->size() != b.obj->size()) return false;
      for (const auto& [k, v] : *a.obj) {
        const Value* other = b.find(k);
        if (!other || !equal(v, *other)) return false;
      }
      return true;
    default:
      return false;
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::string:
      return v.s;
    default:
      return to_repr(v);
  }
}

std::string to_repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return "";
    case Value::Kind::none:
      return "None";
    case Value::Kind::boolean:
      return v.b ? "True" : "False";
    case Value::Kind::integer:
      return std::to_string(v.i);
    case Value::Kind::number:
      return float_text(v.d);
    case Value::Kind::string:
      return quoted_repr(v.s);
    case Value::Kind::array: {
      std::string out = "[";
      for (size_t k = 0; k < v.arr->size(); ++k) out += (k ? ", " : "") + to_repr((*v.arr)[k]);
      return out + "]";
    }
    case Value::Kind::object: {
      if (v.is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, e] : *v.obj) {
        out += (first ? "" : ", ") + quoted_repr(k) + ": " + to_repr(e);
        first = false;
      }
      return out + "}";
    }
  }
  return "";
}

std::string to_json_text(const Value& v, int indent, int depth) {
  // json.dumps: ", " / ": " on one line; with indent, one item a line and "," ending each but the last.
  const std::string open_line = indent < 0 ? "" : "\n" + std::string(std::size_t(indent * (depth + 1)), ' ');
  const std::string close_line = indent < 0 ? "" : "\n" + std::string(std::size_t(indent * depth), ' ');
  const std::string between = indent < 0 ? ", " : "," + open_line;
  switch (v.kind) {
    case Value::Kind::undefined:
    case Value::Kind::none:
      return "null";
    case Value::Kind::boolean:
      return v.b ? "true" : "false";
    case Value::Kind::integer:
      return std::to_string(v.i);
    case Value::Kind::number:
      if (std::isnan(v.d)) return "NaN";
      if (std::isinf(v.d)) return v.d > 0 ? "Infinity" : "-Infinity";
      return float_text(v.d);
    case Value::Kind::string:
      return json_string(v.s);
    case Value::Kind::array: {
      if (v.arr->empty()) return "[]";
      std::string out = "[" + open_line;
      for (size_t k = 0; k < v.arr->size(); ++k)
        out += (k ? between : "") + to_json_text((*v.arr)[k], indent, depth + 1);
      return out + close_line + "]";
    }
    case Value::Kind::object: {
      if (v.obj->empty()) return "{}";
      std::string out = "{" + open_line;
      bool first = true;
      for (const auto& [k, e] : *v.obj) {
        out += (first ? "" : between) + json_string(k) + ": " + to_json_text(e, indent, depth + 1);
        first = false;
      }
      return out + close_line + "}";
    }
  }
  return "null";
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::undefined:
      return "undefined";
    case Value::Kind::none:
      return "none";
    case Value::Kind::boolean:
      return "bool";
    case Value::Kind::integer:
      return "int";
    case Value::Kind::number:
      return "float";
    case Value::Kind::string:
      return "str";
    case Value::Kind::array:
      return "list";
    case Value::Kind::object:
      return v.is_namespace ? "namespace" : "dict";
  }
  return "?";
}

namespace {

// Simple (one to one) case mapping of the scripts chat content commonly uses: ASCII, Latin-1,
// Latin Extended-A, Greek and Cyrillic. Other code points are kept.
uint32_t map_case(uint32_t c, bool upper) {
  if (c < 0x80) return upper ? uint32_t(std::toupper(int(c))) : uint32_t(std::tolower(int(c)));
  if (upper) {
    if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 0x20;
    if (c == 0xFF) return 0x178;
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 0x20;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x430 && c <= 0x44F) return c - 0x20;
    if (c >= 0x450 && c <= 0x45F) return c - 0x50;
  } else {
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 0x20;
    if (c == 0x178) return 0xFF;
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 0x20;
    if (c >= 0x410 && c <= 0x42F) return c + 0x20;
    if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  }
  // Latin Extended-A pairs (even upper, odd lower) outside the irregular 0x130-0x131, 0x138-0x148
  // (odd upper there), 0x149, 0x178-0x17E (odd upper), 0x17F.
  const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17F && c != 0x178) {
    const bool is_upper = odd_upper ? (c % 2 == 1) : (c % 2 == 0);
    if (upper && !is_upper) return c - 1;
    if (!upper && is_upper) return c + 1;
  }
  return c;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

}  // namespace

std::string change_case(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    const auto b = static_cast<unsigned char>(s[k]);
    const size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
    if (len == 1 || k + len > s.size()) {
      out += len == 1 && b < 0x80 ? char(map_case(b, upper)) : s[k];
      ++k;
      continue;
    }
    uint32_t c = b & (0xFF >> (len + 1));
    for (size_t j = 1; j < len; ++j) c = (c << 6) | (static_cast<unsigned char>(s[k + j]) & 0x3F);
    append_utf8(out, map_case(c, upper));
    k += len;
  }
  return out;
}

std::vector<uint32_t> codepoint_offsets(const std::string& s) {
  std::vector<uint32_t> offsets;
  for (uint32_t k = 0; k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) offsets.push_back(k);
  return offsets;
}

}  // namespace unstuck::tokenizer::jinja
