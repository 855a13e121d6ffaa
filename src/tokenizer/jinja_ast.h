// Private to the chat-template code: the values a Jinja expression computes (Python's types as
// jinja2 sees them: Undefined, None, bool, int, float, str, list, dict, namespace) and the parsed
// template (statements and expressions), with source offsets for error messages.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace unstuck::tokenizer::jinja {

struct Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // insertion-ordered, like a Python dict

struct Value {
  enum class Kind { undefined, none, boolean, integer, number, string, array, object };
  Kind kind = Kind::undefined;
  bool b = false;
  int64_t i = 0;
  double d = 0.0;
  std::string s;               // string; for undefined: the name that was looked up
  std::shared_ptr<Array> arr;  // shared like Python lists (namespace attributes mutate in place)
  std::shared_ptr<Object> obj;
  bool is_namespace = false;  // an object made by namespace(): attributes may be assigned

  static Value none() {
    Value v;
    v.kind = Kind::none;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::boolean;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Kind::integer;
    v.i = x;
    return v;
  }
  static Value number(double x) {
    Value v;
    v.kind = Kind::number;
    v.d = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.kind = Kind::string;
    v.s = std::move(x);
    return v;
  }
  static Value array(Array x = {}) {
    Value v;
    v.kind = Kind::array;
    v.arr = std::make_shared<Array>(std::move(x));
    return v;
  }
  static Value object(Object x = {}) {
    Value v;
    v.kind = Kind::object;
    v.obj = std::make_shared<Object>(std::move(x));
    return v;
  }
  static Value undefined(std::string name) {
    Value v;
    v.s = std::move(name);
    return v;
  }

  bool is(Kind k) const { return kind == k; }
  const Value* find(const std::string& key) const;  // object member or nullptr
};

Value from_json(const nlohmann::ordered_json& j);
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
std::string to_str(const Value& v);   // Python's str(): what {{ x }} prints ("" for undefined)
std::string to_repr(const Value& v);  // Python's repr()
// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: None, all on one line).
std::string to_json_text(const Value& v, int indent = -1, int depth = 0);
std::string type_name(const Value& v);
std::vector<uint32_t> codepoint_offsets(const std::string& s);  // byte offset of each code point
std::string change_case(const std::string& s, bool upper);      // str.upper() / str.lower()

// ---- the parsed template ----------------------------------------------------------------------

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    literal,  // value
    name,     // text
    list,     // args
    dict,     // keys[i]: args[i]
    attr,     // args[0].text
    item,     // args[0][args[1]]
    slice,    // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    call,     // text(args, kwargs) global or args[0].text(args[1..]) method when `method`
    filter,   // args[0] | text(args[1..], kwargs)
    test,     // args[0] is [not] text
    unary,    // text: not, -, +
    binary,   // args[0] text args[1]: or and == != < <= > >= in "not in" + - ~ * / // % **
    ternary,  // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind = Kind::literal;
  size_t pos = 0;  // source offset, for messages
  Value value;
  std::string text;
  bool negated = false;  // test: `is not`
  bool method = false;   // call: a method of args[0]
  std::vector<ExprPtr> args;
  std::vector<std::string> keys;                        // dict keys / kwarg names
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // call/filter keyword arguments
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

struct Node {
  enum class Kind { text, output, if_, for_, set, break_, continue_ };
  Kind kind = Kind::text;
  size_t pos = 0;
  std::string text;                  // text; set: variable name
  std::string attr;                  // set: namespace attribute (ns.attr = ...)
  std::vector<std::string> targets;  // for: loop variables (a, b unpacks pairs)
  std::vector<ExprPtr> conditions;   // if/elif conditions; output/set/for: [0] = the expression
  std::vector<Body> branches;        // if: one per condition (+ else); for: body (+ else)
};

struct Template {
  std::string source;  // normalized text (positions refer to it)
  Body body;
};

// Parses `source` (after newline normalization). Throws UserError prefixed with `name`.
std::unique_ptr<Template> parse_template(const std::string& source, const std::string& name, int max_nesting);
// "line 3, column 8" of `pos` in `source`.
std::string where(const std::string& source, size_t pos);

}  // namespace unstuck::tokenizer::jinja
