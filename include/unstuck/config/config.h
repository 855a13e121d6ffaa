// Reflection-lite configs. An options struct lists its fields once, in
// `template <class V> void visit(V& v) { v("name", field, "one-line doc"); ... }`; bind() turns
// that list into a tree of typed Fields bound to one object, and the functions below load YAML
// files, apply `a.b.c=value` overrides, dump resolved YAML and print docs on any such tree.
#pragma once

#include <cstdint>
#include <filesystem>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "unstuck/common/value_names.h"

namespace unstuck::config {

// A field's value, as the generic code sees it. Enums travel as their names.
using Value = std::variant<bool, int64_t, double, std::string, std::vector<int64_t>, std::vector<double>,
                           std::vector<std::string>>;

enum class Kind {
  section,
  boolean,
  integer,
  real,
  string,
  enumeration,
  int_list,
  real_list,
  string_list,
  section_list,  // a list of sections of one type: `reward.terms: [{verifier: math, weight: 1}, ...]`
  mapping        // a free mapping handed on as it is (`reward.function.kwargs: {method: flexible}`), kept as JSON
};

// Names of values shared with the components below config (common/value_names.h).
using unstuck::enum_name;
using unstuck::format_double;
using unstuck::Mapping;

// One key of a config tree, bound to a member of a live object (which must outlive the Field).
struct Field {
  std::string name;  // key within its parent section
  std::string doc;   // one-line description
  Kind kind = Kind::section;
  std::vector<std::string> choices;  // enumeration: allowed names, in declaration order
  int64_t min = 0;                   // integer / int_list: range of the C++ type
  int64_t max = 0;
  std::function<Value()> get;             // leaves only
  std::function<void(const Value&)> set;  // leaves only; the value is already checked
  std::vector<Field> children;            // sections only, in visit() order
  // section_list only: the list's length; resize (new elements take their defaults, the list is
  // replaced as a whole, like a list of numbers); element i bound as a section (valid until the next
  // resize); and a call of `fn` on the tree of a default element (the docs' keys `list[].key`).
  std::function<std::size_t()> size;
  std::function<void(std::size_t)> resize;
  std::function<Field(std::size_t)> element;
  std::function<void(const std::function<void(const Field&)>& fn)> with_default_element;
};

// ---- operations on a bound tree (src/config/*.cpp)

// Applies a YAML file on top of the current values. Throws UserError naming the file, line and
// dotted key for a missing file, malformed YAML, an unknown key or a value of the wrong type.
void load_yaml_file(const Field& root, const std::filesystem::path& path);
// Same for YAML text; `source` names it in errors (a file name, "<string>").
void load_yaml_string(const Field& root, const std::string& text, const std::string& source);
// Applies one `a.b.c=value` override; the value is parsed as a YAML scalar or flow value
// (`optim.lr=3e-6`, `data.sizes=[1, 2]`). Errors name the override text.
void apply_override(const Field& root, const std::string& text);
// The tree as YAML, sections nested, with the docs as end-of-line comments when `with_docs`.
std::string to_yaml(const Field& root, bool with_docs = true);
// Every leaf as `dotted.key (type, default value)` followed by its doc; or a Markdown table.
std::string docs_text(const Field& root);
std::string docs_markdown(const Field& root);

// ---- binding

template <class T>
void bind_value(Field& field, T& value);

// The visitor passed to visit(): appends one Field per `v(name, member, doc)` call.
class FieldBinder {
 public:
  explicit FieldBinder(std::vector<Field>& out) : out_(out) {}
  template <class T>
  void operator()(const char* name, T& value, const char* doc) {
    Field field;
    field.name = name;
    field.doc = doc;
    bind_value(field, value);
    out_.push_back(std::move(field));
  }

 private:
  std::vector<Field>& out_;
};

namespace detail {
template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

template <class T>
constexpr bool is_int = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Integer range of T as int64 (unsigned 64-bit values above INT64_MAX are not representable).
template <class T>
void set_range(Field& field) {
  field.min = static_cast<int64_t>(std::numeric_limits<T>::min());
  constexpr bool wide = std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t);
  field.max = wide ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(std::numeric_limits<T>::max());
}

template <class T>
void bind_enum(Field& field, T& value) {
  field.kind = Kind::enumeration;
  for (const auto& entry : enum_names(T{})) field.choices.emplace_back(entry.second);
  field.get = [&value] { return Value(std::string(enum_name(value))); };
  field.set = [&value](const Value& v) {
    for (const auto& [e, name] : enum_names(T{})) {
      if (std::get<std::string>(v) == name) value = e;
    }
  };
}

template <class T>
constexpr bool is_section =
    std::is_class_v<T> && !std::is_same_v<T, std::string> && !std::is_same_v<T, Mapping> && !is_vector<T>::value;

template <class T>
void bind_section_list(Field& field, std::vector<T>& value) {
  field.kind = Kind::section_list;
  field.size = [&value] { return value.size(); };
  field.resize = [&value](std::size_t n) { value.assign(n, T{}); };
  field.element = [&value](std::size_t i) {
    Field element;
    element.name = "[" + std::to_string(i) + "]";
    bind_value(element, value.at(i));
    return element;
  };
  field.with_default_element = [](const std::function<void(const Field&)>& fn) {
    T defaults{};
    Field element;
    element.name = "[]";
    bind_value(element, defaults);
    fn(element);
  };
}

template <class T>
void bind_list(Field& field, std::vector<T>& value) {
  using Elem = std::conditional_t<is_int<T>, int64_t, T>;
  if constexpr (is_int<T>) {
    field.kind = Kind::int_list;
    set_range<T>(field);
  } else if constexpr (std::is_same_v<T, double>) {
    field.kind = Kind::real_list;
  } else {
    static_assert(std::is_same_v<T, std::string>, "config lists hold integers, doubles, strings or sections");
    field.kind = Kind::string_list;
  }
  field.get = [&value] { return Value(std::vector<Elem>(value.begin(), value.end())); };
  field.set = [&value](const Value& v) {
    const auto& elems = std::get<std::vector<Elem>>(v);
    value.assign(elems.begin(), elems.end());
  };
}
}  // namespace detail

template <class T>
void bind_value(Field& field, T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    field.kind = Kind::boolean;
    field.get = [&value] { return Value(value); };
    field.set = [&value](const Value& v) { value = std::get<bool>(v); };
  } else if constexpr (detail::is_int<T>) {
    field.kind = Kind::integer;
    detail::set_range<T>(field);
    field.get = [&value] { return Value(static_cast<int64_t>(value)); };
    field.set = [&value](const Value& v) { value = static_cast<T>(std::get<int64_t>(v)); };
  } else if constexpr (std::is_floating_point_v<T>) {
    field.kind = Kind::real;
    field.get = [&value] { return Value(static_cast<double>(value)); };
    field.set = [&value](const Value& v) { value = static_cast<T>(std::get<double>(v)); };
  } else if constexpr (std::is_same_v<T, std::string>) {
    field.kind = Kind::string;
    field.get = [&value] { return Value(value); };
    field.set = [&value](const Value& v) { value = std::get<std::string>(v); };
  } else if constexpr (std::is_same_v<T, Mapping>) {
    field.kind = Kind::mapping;
    field.get = [&value] { return Value(value.json); };
    field.set = [&value](const Value& v) { value.json = std::get<std::string>(v); };
  } else if constexpr (std::is_enum_v<T>) {
    detail::bind_enum(field, value);
  } else if constexpr (detail::is_vector<T>::value) {
    if constexpr (detail::is_section<typename T::value_type>) {
      detail::bind_section_list(field, value);
    } else {
      detail::bind_list(field, value);
    }
  } else {
    field.kind = Kind::section;
    FieldBinder binder(field.children);
    value.visit(binder);
  }
}

// The field tree of `object` (a struct with visit()); the root is an unnamed section.
template <class T>
Field bind(T& object) {
  Field root;
  bind_value(root, object);
  return root;
}

}  // namespace unstuck::config
