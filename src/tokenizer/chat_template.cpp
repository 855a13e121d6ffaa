// Renders a parsed chat template (jinja_parse.cpp) with jinja2's semantics for the subset: scoping
// (a for loop's body is its own scope, `if` is not; namespace() objects carry values out of loops),
// Undefined, Python operators, the loop object, filters, tests and str/dict methods.
#include "unstuck/tokenizer/chat_template.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "tokenizer/jinja_ast.h"
#include "unstuck/common/error.h"

namespace unstuck::tokenizer {
namespace {

using jinja::Expr;
using jinja::Node;
using jinja::Value;
using K = Value::Kind;

enum class Flow { normal, break_, continue_ };

class Renderer {
 public:
  Renderer(const jinja::Template& t, const std::string& name, const ChatTemplateLimits& limits)
      : t_(t), name_(name), limits_(limits) {}

  std::string run(const nlohmann::ordered_json& context) {
    scopes_.emplace_back();
    for (auto it = context.begin(); it != context.end(); ++it) scopes_.back()[it.key()] = jinja::from_json(it.value());
    exec(t_.body);
    return std::move(out_);
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw UserError("chat template " + name_ + ": " + jinja::where(t_.source, pos) + ": " + what);
  }

  void emit(const std::string& s, size_t pos) {
    out_ += s;
    if (int64_t(out_.size()) > limits_.max_output_bytes)
      fail(pos, "output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }

  Flow exec(const jinja::Body& body) {
    for (const auto& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::normal) return f;
    }
    return Flow::normal;
  }

  Flow exec(const Node& n) {
    switch (n.kind) {
      case Node::Kind::text:
        emit(n.text, n.pos);
        return Flow::normal;
      case Node::Kind::output:
        emit(jinja::to_str(eval(*n.conditions[0])), n.pos);
        return Flow::normal;
      case Node::Kind::if_:
        for (size_t k = 0; k < n.conditions.size(); ++k)
          if (jinja::truthy(eval(*n.conditions[k]))) return exec(n.branches[k]);
        if (n.branches.size() > n.conditions.size()) return exec(n.branches.back());
        return Flow::normal;
      case Node::Kind::for_:
        exec_for(n);
        return Flow::normal;
      case Node::Kind::set: {
        Value v = eval(*n.conditions[0]);
        if (n.attr.empty()) {
          scopes_.back()[n.text] = std::move(v);
          return Flow::normal;
        }
        const Value target = lookup(n.text);
        if (!target.is_namespace)
          fail(n.pos, "cannot assign attribute '" + n.attr + "' of '" + n.text + "' (not a namespace)");
        for (auto& [k, e] : *target.obj)
          if (k == n.attr) {
            e = std::move(v);
            return Flow::normal;
          }
        target.obj->emplace_back(n.attr, std::move(v));
        return Flow::normal;
      }
      case Node::Kind::break_:
        return Flow::break_;
      case Node::Kind::continue_:
        return Flow::continue_;
    }
    return Flow::normal;
  }

  std::vector<Value> items_of(const Value& v, size_t pos) {
    switch (v.kind) {
      case K::undefined:
        return {};
      case K::array:
        return *v.arr;
      case K::object: {
        std::vector<Value> keys;
        for (const auto& [k, e] : *v.obj) keys.push_back(Value::string(k));
        return keys;
      }
      case K::string: {
        std::vector<Value> chars;
        const auto cps = jinja::codepoint_offsets(v.s);
        for (size_t k = 0; k < cps.size(); ++k)
          chars.push_back(Value::string(v.s.substr(cps[k], (k + 1 < cps.size() ? cps[k + 1] : v.s.size()) - cps[k])));
        return chars;
      }
      default:
        fail(pos, "'" + jinja::type_name(v) + "' object is not iterable");
    }
  }

  void exec_for(const Node& n) {
    const std::vector<Value> items = items_of(eval(*n.conditions[0]), n.pos);
    if (items.empty()) {
      if (n.branches.size() > 1) exec(n.branches[1]);
      return;
    }
    const int64_t length = int64_t(items.size());
    for (int64_t k = 0; k < length; ++k) {
      if (++iterations_ > limits_.max_loop_iterations)
        fail(n.pos, "more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations");
      scopes_.emplace_back();
      auto& scope = scopes_.back();
      const Value& item = items[size_t(k)];
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = item;
      } else {
        if (!item.is(K::array) || item.arr->size() != n.targets.size())
          fail(n.pos,
               "cannot unpack " + jinja::type_name(item) + " into " + std::to_string(n.targets.size()) + " names");
        for (size_t t = 0; t < n.targets.size(); ++t) scope[n.targets[t]] = (*item.arr)[t];
      }
      scope["loop"] = Value::object({{"index0", Value::integer(k)},
                                     {"index", Value::integer(k + 1)},
                                     {"revindex0", Value::integer(length - k - 1)},
                                     {"revindex", Value::integer(length - k)},
                                     {"first", Value::boolean(k == 0)},
                                     {"last", Value::boolean(k == length - 1)},
                                     {"length", Value::integer(length)}});
      const Flow f = exec(n.branches[0]);
      scopes_.pop_back();
      if (f == Flow::break_) break;
    }
  }

  Value lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      const auto it = s->find(name);
      if (it != s->end()) return it->second;
    }
    return Value::undefined(name);
  }

  static int64_t as_int(const Value& v) { return v.is(K::boolean) ? int64_t(v.b) : v.i; }
  static bool is_num(const Value& v) { return v.is(K::integer) || v.is(K::number) || v.is(K::boolean); }
  static double as_double(const Value& v) { return v.is(K::number) ? v.d : double(as_int(v)); }

  void require_defined(const Value& v, size_t pos) const {
    if (v.is(K::undefined)) fail(pos, "'" + v.s + "' is undefined");
  }

  // Python's item access: dict key, list/str index (negative from the end); missing -> undefined.
  Value get_item(const Value& obj, const Value& key, size_t pos) const {
    require_defined(obj, pos);
    if (obj.is(K::object) && key.is(K::string)) {
      const Value* v = obj.find(key.s);
      return v ? *v : Value::undefined(key.s);
    }
    if ((obj.is(K::array) || obj.is(K::string)) && (key.is(K::integer) || key.is(K::boolean))) {
      const auto cps = obj.is(K::string) ? jinja::codepoint_offsets(obj.s) : std::vector<uint32_t>{};
      const int64_t size = obj.is(K::array) ? int64_t(obj.arr->size()) : int64_t(cps.size());
      int64_t idx = as_int(key);
      if (idx < 0) idx += size;
      if (idx < 0 || idx >= size) return Value::undefined(jinja::to_repr(key));
      if (obj.is(K::array)) return (*obj.arr)[size_t(idx)];
      const size_t end = size_t(idx + 1) < cps.size() ? cps[size_t(idx + 1)] : obj.s.size();
      return Value::string(obj.s.substr(cps[size_t(idx)], end - cps[size_t(idx)]));
    }
    return Value::undefined(jinja::to_str(key));
  }

  Value slice(const Value& obj, const Expr& e) {
    require_defined(obj, e.pos);
    if (!obj.is(K::array) && !obj.is(K::string)) fail(e.pos, "cannot slice a " + jinja::type_name(obj));
    const auto cps = obj.is(K::string) ? jinja::codepoint_offsets(obj.s) : std::vector<uint32_t>{};
    const int64_t size = obj.is(K::array) ? int64_t(obj.arr->size()) : int64_t(cps.size());
    const auto part = [&](int k, bool& given) -> int64_t {
      given = e.args[size_t(k)] != nullptr;
      if (!given) return 0;
      const Value v = eval(*e.args[size_t(k)]);
      if (v.is(K::none)) {
        given = false;
        return 0;
      }
      if (!v.is(K::integer)) fail(e.pos, "slice indices must be integers");
      return v.i;
    };
    bool has_start, has_stop, has_step;
    int64_t start = part(1, has_start), stop = part(2, has_stop), step = part(3, has_step);
    if (!has_step) step = 1;
    if (step == 0) fail(e.pos, "slice step cannot be zero");
    // Python's slice.indices().
    const auto clamp = [&](int64_t v, bool given, int64_t dflt) {
      if (!given) return dflt;
      if (v < 0) v += size;
      if (step > 0) return std::clamp<int64_t>(v, 0, size);
      return std::clamp<int64_t>(v, -1, size - 1);
    };
    start = clamp(start, has_start, step > 0 ? 0 : size - 1);
    stop = clamp(stop, has_stop, step > 0 ? size : -1);
    std::vector<int64_t> picked;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) picked.push_back(k);
    if (obj.is(K::array)) {
      jinja::Array out;
      for (int64_t k : picked) out.push_back((*obj.arr)[size_t(k)]);
      return Value::array(std::move(out));
    }
    std::string out;
    for (int64_t k : picked) {
      const size_t end = size_t(k + 1) < cps.size() ? cps[size_t(k + 1)] : obj.s.size();
      out += obj.s.substr(cps[size_t(k)], end - cps[size_t(k)]);
    }
    return Value::string(out);
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::literal:
        return e.value;
      case Expr::Kind::name:
        return lookup(e.text);
      case Expr::Kind::list: {
        jinja::Array a;
        for (const auto& x : e.args) a.push_back(eval(*x));
        return Value::array(std::move(a));
      }
      case Expr::Kind::dict: {
        jinja::Object o;
        for (size_t k = 0; k < e.keys.size(); ++k) o.emplace_back(e.keys[k], eval(*e.args[k]));
        return Value::object(std::move(o));
      }
      case Expr::Kind::attr: {
        const Value obj = eval(*e.args[0]);
        return get_item(obj, Value::string(e.text), e.pos);
      }
      case Expr::Kind::item: {
        const Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]), e.pos);
      }
      case Expr::Kind::slice:
        return slice(eval(*e.args[0]), e);
      case Expr::Kind::call:
        return e.method ? call_method(e) : call_global(e);
      case Expr::Kind::filter:
        return apply_filter(e);
      case Expr::Kind::test:
        return Value::boolean(run_test(e) != e.negated);
      case Expr::Kind::unary: {
        const Value v = eval(*e.args[0]);
        if (e.text == "not") return Value::boolean(!jinja::truthy(v));
        if (!is_num(v)) fail(e.pos, "bad operand type for unary " + e.text + ": " + jinja::type_name(v));
        if (e.text == "+") return v.is(K::number) ? v : Value::integer(as_int(v));
        return v.is(K::number) ? Value::number(-v.d) : Value::integer(-as_int(v));
      }
      case Expr::Kind::binary:
        return binary(e);
      case Expr::Kind::ternary:
        if (jinja::truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined("");
    }
    return Value::undefined("");
  }

  Value binary(const Expr& e) {
    const std::string& op = e.text;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return jinja::truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return jinja::truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "==") return Value::boolean(jinja::equal(a, b));
    if (op == "!=") return Value::boolean(!jinja::equal(a, b));
    if (op == "~") return Value::string(jinja::to_str(a) + jinja::to_str(b));
    if (op == "in" || op == "not in") return Value::boolean(contains(b, a, e.pos) == (op == "in"));
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int cmp;
      if (is_num(a) && is_num(b))
        cmp = as_double(a) < as_double(b) ? -1 : as_double(a) > as_double(b) ? 1 : 0;
      else if (a.is(K::string) && b.is(K::string))
        cmp = a.s.compare(b.s);
      else
        fail(e.pos, "'" + op + "' not supported between " + jinja::type_name(a) + " and " + jinja::type_name(b));
      return Value::boolean(op == "<" ? cmp < 0 : op == "<=" ? cmp <= 0 : op == ">" ? cmp > 0 : cmp >= 0);
    }
    if (op == "+" && a.is(K::string) && b.is(K::string)) return Value::string(a.s + b.s);
    if (op == "+" && a.is(K::array) && b.is(K::array)) {
      jinja::Array out = *a.arr;
      out.insert(out.end(), b.arr->begin(), b.arr->end());
      return Value::array(std::move(out));
    }
    if (op == "*" && a.is(K::string) && b.is(K::integer)) {
      std::string out;
      for (int64_t k = 0; k < b.i; ++k) out += a.s;
      return Value::string(out);
    }
    if (!is_num(a) || !is_num(b))
      fail(e.pos, "unsupported operand types for " + op + ": " + jinja::type_name(a) + " and " + jinja::type_name(b));
    const bool ints = !a.is(K::number) && !b.is(K::number);
    if (op == "/") {
      if (as_double(b) == 0) fail(e.pos, "division by zero");
      return Value::number(as_double(a) / as_double(b));
    }
    if (ints) {
      const int64_t x = as_int(a), y = as_int(b);
      if (op == "+") return Value::integer(x + y);
      if (op == "-") return Value::integer(x - y);
      if (op == "*") return Value::integer(x * y);
      if (op == "**" && y >= 0) {
        int64_t r = 1;
        for (int64_t k = 0; k < y && k < 64; ++k) r *= x;
        return Value::integer(r);
      }
      if (y == 0 && (op == "//" || op == "%")) fail(e.pos, "integer division or modulo by zero");
      // Python floors both.
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      if (op == "//") return Value::integer(q);
      if (op == "%") return Value::integer(r);
    }
    const double x = as_double(a), y = as_double(b);
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (op == "**") return Value::number(std::pow(x, y));
    if (y == 0) fail(e.pos, "float division by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    return Value::number(x - y * std::floor(x / y));
  }

  bool contains(const Value& hay, const Value& needle, size_t pos) const {
    if (hay.is(K::string)) {
      if (!needle.is(K::string)) fail(pos, "'in <string>' requires a string on the left");
      return hay.s.find(needle.s) != std::string::npos;
    }
    if (hay.is(K::array)) {
      for (const Value& v : *hay.arr)
        if (jinja::equal(v, needle)) return true;
      return false;
    }
    if (hay.is(K::object)) return needle.is(K::string) && hay.find(needle.s) != nullptr;
    fail(pos, "argument of type '" + jinja::type_name(hay) + "' is not iterable");
  }

  std::vector<Value> args_of(const Expr& e, size_t first) {
    std::vector<Value> out;
    for (size_t k = first; k < e.args.size(); ++k) out.push_back(eval(*e.args[k]));
    return out;
  }

  Value call_global(const Expr& e) {
    std::vector<Value> args = args_of(e, 0);
    if (e.text == "raise_exception") {
      throw UserError("chat template " + name_ + " raised: " + (args.empty() ? "" : jinja::to_str(args[0])));
    }
    if (e.text == "namespace") {
      Value ns = Value::object();
      ns.is_namespace = true;
      for (const auto& [k, x] : e.kwargs) ns.obj->emplace_back(k, eval(*x));
      return ns;
    }
    // range(stop) / range(start, stop[, step])
    if (args.empty() || args.size() > 3) fail(e.pos, "range() takes 1 to 3 arguments");
    for (const Value& a : args)
      if (!a.is(K::integer)) fail(e.pos, "range() arguments must be integers");
    const int64_t start = args.size() > 1 ? args[0].i : 0, stop = args.size() > 1 ? args[1].i : args[0].i;
    const int64_t step = args.size() > 2 ? args[2].i : 1;
    if (step == 0) fail(e.pos, "range() step must not be zero");
    jinja::Array out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (int64_t(out.size()) >= limits_.max_loop_iterations) fail(e.pos, "range() too long");
      out.push_back(Value::integer(k));
    }
    return Value::array(std::move(out));
  }

  static std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
    size_t b = 0, end = s.size();
    if (left)
      while (b < end && chars.find(s[b]) != std::string::npos) ++b;
    if (right)
      while (end > b && chars.find(s[end - 1]) != std::string::npos) --end;
    return s.substr(b, end - b);
  }

  Value call_method(const Expr& e) {
    const Value self = eval(*e.args[0]);
    require_defined(self, e.pos);
    std::vector<Value> args = args_of(e, 1);
    const std::string& m = e.text;
    const auto str_arg = [&](size_t k) -> std::string {
      if (k >= args.size() || !args[k].is(K::string)) fail(e.pos, m + "() expects a string argument");
      return args[k].s;
    };
    if (self.is(K::object) && !self.is_namespace) {
      if (m == "get") {
        const Value* v = self.find(str_arg(0));
        return v ? *v : args.size() > 1 ? args[1] : Value::none();
      }
      jinja::Array out;
      for (const auto& [k, v] : *self.obj) {
        if (m == "items")
          out.push_back(Value::array({Value::string(k), v}));
        else if (m == "keys")
          out.push_back(Value::string(k));
        else if (m == "values")
          out.push_back(v);
        else
          fail(e.pos, "dict has no method '" + m + "'");
      }
      return Value::array(std::move(out));
    }
    if (!self.is(K::string)) fail(e.pos, "'" + jinja::type_name(self) + "' object has no method '" + m + "'");
    const std::string& s = self.s;
    static const std::string kWs = " \t\n\r\f\v";
    if (m == "strip" || m == "lstrip" || m == "rstrip") {
      const std::string chars = args.empty() || args[0].is(K::none) ? kWs : str_arg(0);
      return Value::string(strip_chars(s, chars, m != "rstrip", m != "lstrip"));
    }
    if (m == "startswith") return Value::boolean(s.compare(0, str_arg(0).size(), str_arg(0)) == 0);
    if (m == "endswith") {
      const std::string x = str_arg(0);
      return Value::boolean(s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0);
    }
    if (m == "upper" || m == "lower") return Value::string(jinja::change_case(s, m == "upper"));
    if (m == "replace") return Value::string(replace_all(s, str_arg(0), str_arg(1), e.pos));
    if (m == "split") {
      jinja::Array out;
      if (args.empty() || args[0].is(K::none)) {
        std::istringstream in(s);
        std::string w;
        while (in >> w) out.push_back(Value::string(w));
        return Value::array(std::move(out));
      }
      const std::string sep = str_arg(0);
      if (sep.empty()) fail(e.pos, "split(): empty separator");
      size_t from = 0, at;
      while ((at = s.find(sep, from)) != std::string::npos) {
        out.push_back(Value::string(s.substr(from, at - from)));
        from = at + sep.size();
      }
      out.push_back(Value::string(s.substr(from)));
      return Value::array(std::move(out));
    }
    fail(e.pos, "str has no method '" + m + "'");
  }

  std::string replace_all(const std::string& s, const std::string& from, const std::string& to, size_t pos) const {
    if (from.empty()) fail(pos, "replace(): empty pattern is not supported");
    std::string out;
    size_t at = 0, hit;
    while ((hit = s.find(from, at)) != std::string::npos) {
      out += s.substr(at, hit - at) + to;
      at = hit + from.size();
    }
    return out + s.substr(at);
  }

  Value apply_filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    std::vector<Value> args = args_of(e, 1);
    const std::string& f = e.text;
    if (f == "default" || f == "d") {
      const bool boolean = args.size() > 1 && jinja::truthy(args[1]);
      const bool use_default = v.is(K::undefined) || (boolean && !jinja::truthy(v));
      return use_default ? (args.empty() ? Value::string("") : args[0]) : v;
    }
    if (f == "tojson") {  // transformers' tojson(x, indent=None); its other options are refused
      int indent = -1;
      for (const auto& [k, x] : e.kwargs) {
        const Value value = eval(*x);
        if (k != "indent" || !(value.is(K::integer) || value.is(K::none)))
          fail(e.pos, "tojson takes indent=<integer> only here (got " + k + "=)");
        indent = value.is(K::integer) ? int(std::clamp<int64_t>(value.i, 0, 64)) : -1;
      }
      if (!args.empty()) fail(e.pos, "tojson with positional arguments is not supported");
      return Value::string(jinja::to_json_text(v, indent));
    }
    if (!e.kwargs.empty()) fail(e.pos, "filter '" + f + "' takes no keyword arguments here");
    if (f == "string") return Value::string(jinja::to_str(v));
    require_defined(v, e.pos);
    if (f == "trim") return Value::string(strip_chars(jinja::to_str(v), " \t\n\r\f\v", true, true));
    if (f == "upper" || f == "lower") return Value::string(jinja::change_case(jinja::to_str(v), f == "upper"));
    if (f == "capitalize") {  // first code point upper, the rest lower
      const std::string s = jinja::to_str(v);
      const auto cps = jinja::codepoint_offsets(s);
      const size_t first = cps.size() > 1 ? cps[1] : s.size();
      return Value::string(jinja::change_case(s.substr(0, first), true) + jinja::change_case(s.substr(first), false));
    }
    if (f == "length" || f == "count") {
      if (v.is(K::string)) return Value::integer(int64_t(jinja::codepoint_offsets(v.s).size()));
      if (v.is(K::array)) return Value::integer(int64_t(v.arr->size()));
      if (v.is(K::object)) return Value::integer(int64_t(v.obj->size()));
      fail(e.pos, "object of type '" + jinja::type_name(v) + "' has no len()");
    }
    if (f == "int") return Value::integer(is_num(v) ? int64_t(as_double(v)) : std::atoll(jinja::to_str(v).c_str()));
    if (f == "abs") {
      if (!is_num(v)) fail(e.pos, "abs of a " + jinja::type_name(v));
      return v.is(K::number) ? Value::number(std::fabs(v.d)) : Value::integer(std::llabs(as_int(v)));
    }
    if (f == "replace") {
      if (args.size() != 2 || !args[0].is(K::string) || !args[1].is(K::string))
        fail(e.pos, "replace(old, new) expects strings");
      return Value::string(replace_all(jinja::to_str(v), args[0].s, args[1].s, e.pos));
    }
    std::vector<Value> items = items_of(v, e.pos);
    if (f == "select" || f == "reject") {  // select(test, arg): the items that pass (reject: that fail)
      if (args.empty() || !args[0].is(K::string)) fail(e.pos, f + "() needs the name of a test");
      jinja::Array kept;
      for (const Value& x : items)
        if (passes(args[0].s, x, args, e.pos) == (f == "select")) kept.push_back(x);
      return Value::array(std::move(kept));
    }
    if (f == "first") return items.empty() ? Value::undefined("first") : items.front();
    if (f == "last") return items.empty() ? Value::undefined("last") : items.back();
    if (f == "list") return Value::array(items);
    if (f == "reverse") {
      std::reverse(items.begin(), items.end());
      return v.is(K::string) ? Value::string([&] {
        std::string s;
        for (auto& x : items) s += x.s;
        return s;
      }())
                             : Value::array(items);
    }
    if (f == "items") {
      if (!v.is(K::object)) fail(e.pos, "items of a " + jinja::type_name(v));
      jinja::Array out;
      for (const auto& [k, x] : *v.obj) out.push_back(Value::array({Value::string(k), x}));
      return Value::array(std::move(out));
    }
    // join
    const std::string sep = args.empty() ? "" : jinja::to_str(args[0]);
    std::string out;
    for (size_t k = 0; k < items.size(); ++k) out += (k ? sep : "") + jinja::to_str(items[k]);
    return Value::string(out);
  }

  bool run_test(const Expr& e) { return test_value(e.text, eval(*e.args[0]), e.pos); }

  // select()/reject()'s test `t` of an item: one of run_test's, or equalto / eq / == / ne / != with
  // its argument (args[1]).
  bool passes(const std::string& t, const Value& x, const std::vector<Value>& args, size_t pos) {
    if (t == "equalto" || t == "eq" || t == "==" || t == "ne" || t == "!=") {
      if (args.size() != 2) fail(pos, "the test '" + t + "' takes one argument");
      return jinja::equal(x, args[1]) == (t == "equalto" || t == "eq" || t == "==");
    }
    if (args.size() != 1) fail(pos, "the test '" + t + "' takes no argument here");
    return test_value(t, x, pos);
  }

  bool test_value(const std::string& t, const Value& v, size_t pos) {
    if (t == "defined") return !v.is(K::undefined);
    if (t == "undefined") return v.is(K::undefined);
    if (t == "none") return v.is(K::none);
    if (t == "string") return v.is(K::string);
    if (t == "number") return v.is(K::integer) || v.is(K::number);
    if (t == "integer") return v.is(K::integer);
    if (t == "float") return v.is(K::number);
    if (t == "boolean") return v.is(K::boolean);
    if (t == "true") return v.is(K::boolean) && v.b;
    if (t == "false") return v.is(K::boolean) && !v.b;
    if (t == "mapping") return v.is(K::object);
    if (t == "iterable") return v.is(K::array) || v.is(K::object) || v.is(K::string) || v.is(K::undefined);
    if (t == "sequence") return v.is(K::array) || v.is(K::object) || v.is(K::string);
    if (t != "odd" && t != "even") fail(pos, "unsupported test '" + t + "'");
    if (!v.is(K::integer)) fail(pos, "test '" + t + "' needs an integer");
    return t == "odd" ? (v.i % 2 != 0) : (v.i % 2 == 0);
  }

  const jinja::Template& t_;
  const std::string& name_;
  const ChatTemplateLimits& limits_;
  std::vector<std::map<std::string, Value>> scopes_;
  std::string out_;
  int64_t iterations_ = 0;
};

}  // namespace

ChatTemplate::ChatTemplate(std::shared_ptr<const jinja::Template> parsed, std::string name, ChatTemplateLimits limits)
    : parsed_(std::move(parsed)), name_(std::move(name)), limits_(limits) {}

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& name, const ChatTemplateLimits& limits) {
  return ChatTemplate(jinja::parse_template(source, name, limits.max_nesting), name, limits);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) throw UserError("chat template " + name_ + ": the context must be a JSON object");
  return Renderer(*parsed_, name_, limits_).run(context);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token) const {
  nlohmann::ordered_json context;
  context["messages"] = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) context["messages"].push_back({{"role", m.role}, {"content", m.content}});
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  return render(context);
}

}  // namespace unstuck::tokenizer
