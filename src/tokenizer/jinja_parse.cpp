// Parser of the chat-template Jinja subset: builds jinja_ast.h's tree from jinja_lex.cpp's tokens
// (jinja2's operator precedence) and refuses constructs outside the subset by name and position.
#include <cctype>
#include <set>
#include <string>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lex.h"
#include "unstuck/common/error.h"

namespace unstuck::tokenizer::jinja {
namespace {

const std::set<std::string> kFilters = {"trim",    "length",  "count", "default", "d",          "tojson", "upper",
                                        "lower",   "string",  "first", "last",    "join",       "list",   "items",
                                        "reverse", "replace", "int",   "abs",     "capitalize", "select", "reject"};
const std::set<std::string> kTests = {"defined",  "undefined", "none",    "string",  "number",
                                      "integer",  "float",     "boolean", "mapping", "iterable",
                                      "sequence", "true",      "false",   "odd",     "even"};
const std::set<std::string> kGlobals = {"raise_exception", "namespace", "range"};
const std::set<std::string> kMethods = {"strip", "lstrip",  "rstrip", "split", "startswith", "endswith", "upper",
                                        "lower", "replace", "items",  "keys",  "values",     "get"};

std::string join_names(const std::set<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

class Parser {
 public:
  Parser(std::vector<Tok> toks, const std::string& src, const std::string& name, int max_nesting)
      : toks_(std::move(toks)), src_(src), name_(name), max_nesting_(max_nesting) {}

  Body parse_all() {
    std::string stop;
    Body body = parse_body({}, stop);
    return body;
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw UserError("chat template " + name_ + ": " + where(src_, pos) + ": " + what);
  }
  const Tok& peek(size_t ahead = 0) const { return toks_[std::min(at_ + ahead, toks_.size() - 1)]; }
  Tok next() { return toks_[std::min(at_++, toks_.size() - 1)]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Kind::op && peek(ahead).text == op;
  }
  bool is_name(const char* n, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Kind::name && peek(ahead).text == n;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(peek().pos, std::string("expected '") + op + "'");
    ++at_;
  }
  void expect_end() {
    if (peek().kind != Tok::Kind::end) fail(peek().pos, "expected the end of the tag");
    ++at_;
  }
  std::string expect_name() {
    if (peek().kind != Tok::Kind::name) fail(peek().pos, "expected a name");
    return next().text;
  }
  struct Depth {
    Depth(Parser& p, size_t pos) : p_(p) {
      if (++p_.depth_ > p_.max_nesting_) p_.fail(pos, "nesting deeper than " + std::to_string(p_.max_nesting_));
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  // Statements until one of `stops` (a block keyword), which is consumed into `stop`.
  Body parse_body(const std::set<std::string>& stops, std::string& stop) {
    Body body;
    while (true) {
      const Tok& t = peek();
      if (t.kind == Tok::Kind::eof) {
        for (const std::string& s : stops)
          if (s.rfind("end", 0) == 0) fail(t.pos, "missing {% " + s + " %}");
        return body;
      }
      if (t.kind == Tok::Kind::text) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::text;
        n->pos = t.pos;
        n->text = t.text;
        body.push_back(std::move(n));
        ++at_;
      } else if (t.kind == Tok::Kind::var_begin) {
        const size_t pos = next().pos;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::output;
        n->pos = pos;
        n->conditions.push_back(parse_expr());
        expect_end();
        body.push_back(std::move(n));
      } else if (t.kind == Tok::Kind::block_begin) {
        ++at_;
        const size_t pos = peek().pos;
        const std::string word = expect_name();
        if (stops.count(word)) {
          stop = word;
          return body;
        }
        body.push_back(parse_statement(word, pos));
      } else {
        fail(t.pos, "unexpected token");
      }
    }
  }

  std::unique_ptr<Node> parse_statement(const std::string& word, size_t pos) {
    Depth guard(*this, pos);
    auto n = std::make_unique<Node>();
    n->pos = pos;
    if (word == "if") {
      n->kind = Node::Kind::if_;
      n->conditions.push_back(parse_expr());
      expect_end();
      while (true) {
        std::string stop;
        n->branches.push_back(parse_body({"elif", "else", "endif"}, stop));
        if (stop == "endif") break;
        if (stop == "elif") {
          n->conditions.push_back(parse_expr());
          expect_end();
          continue;
        }
        expect_end();
        n->branches.push_back(parse_body({"endif"}, stop));
        break;
      }
      expect_end();
    } else if (word == "for") {
      n->kind = Node::Kind::for_;
      n->targets.push_back(expect_name());
      while (is_op(",")) {
        ++at_;
        n->targets.push_back(expect_name());
      }
      if (!is_name("in")) fail(peek().pos, "expected 'in'");
      ++at_;
      n->conditions.push_back(parse_or());
      if (is_name("if")) fail(peek().pos, "unsupported construct 'for ... if' (loop filter)");
      if (is_name("recursive")) fail(peek().pos, "unsupported construct 'recursive' loop");
      expect_end();
      std::string stop;
      n->branches.push_back(parse_body({"else", "endfor"}, stop));
      if (stop == "else") {
        expect_end();
        n->branches.push_back(parse_body({"endfor"}, stop));
      }
      expect_end();
    } else if (word == "set") {
      n->kind = Node::Kind::set;
      n->text = expect_name();
      if (is_op(".")) {
        ++at_;
        n->attr = expect_name();
      }
      if (is_op(",")) fail(peek().pos, "unsupported construct 'set' with several targets");
      if (peek().kind == Tok::Kind::end) fail(pos, "unsupported construct 'set' block ({% set x %}...{% endset %})");
      expect_op("=");
      n->conditions.push_back(parse_expr());
      expect_end();
    } else if (word == "break" || word == "continue") {
      n->kind = word == "break" ? Node::Kind::break_ : Node::Kind::continue_;
      expect_end();
    } else {
      fail(pos, "unsupported statement '" + word + "'");
    }
    return n;
  }

  ExprPtr make(Expr::Kind kind, size_t pos, std::string text = {}) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    e->text = std::move(text);
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, size_t pos) {
    ExprPtr e = make(Expr::Kind::binary, pos, op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_expr() {
    Depth guard(*this, peek().pos);
    ExprPtr body = parse_or();
    if (!is_name("if")) return body;
    const size_t pos = next().pos;
    ExprPtr e = make(Expr::Kind::ternary, pos);
    e->args.push_back(parse_or());
    e->args.push_back(std::move(body));
    if (is_name("else")) {
      ++at_;
      e->args.push_back(parse_expr());
    } else {
      e->args.push_back(nullptr);
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const size_t pos = next().pos;
      left = binary("or", std::move(left), parse_and(), pos);
    }
    return left;
  }
  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const size_t pos = next().pos;
      left = binary("and", std::move(left), parse_not(), pos);
    }
    return left;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth guard(*this, peek().pos);
      const size_t pos = next().pos;
      ExprPtr e = make(Expr::Kind::unary, pos, "not");
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr left = parse_math1();
    while (true) {
      const size_t pos = peek().pos;
      std::string op;
      for (const char* o : {"==", "!=", "<", "<=", ">", ">="}) {
        if (is_op(o)) op = o;
      }
      if (!op.empty()) {
        ++at_;
      } else if (is_name("in")) {
        op = "in";
        ++at_;
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        at_ += 2;
      } else {
        return left;
      }
      left = binary(op, std::move(left), parse_math1(), pos);
    }
  }
  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Tok t = next();
      left = binary(t.text, std::move(left), parse_concat(), t.pos);
    }
    return left;
  }
  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const size_t pos = next().pos;
      left = binary("~", std::move(left), parse_math2(), pos);
    }
    return left;
  }
  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Tok t = next();
      left = binary(t.text, std::move(left), parse_pow(), t.pos);
    }
    return left;
  }
  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const size_t pos = next().pos;
      left = binary("**", std::move(left), parse_unary(true), pos);
    }
    return left;
  }
  ExprPtr parse_unary(bool with_filter) {
    Depth guard(*this, peek().pos);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Tok t = next();
      node = make(Expr::Kind::unary, t.pos, t.text);
      node->args.push_back(parse_unary(false));
    } else {
      node = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(node)) : std::move(node);
  }

  ExprPtr parse_primary() {
    const Tok t = next();
    switch (t.kind) {
      case Tok::Kind::name: {
        ExprPtr e = make(Expr::Kind::literal, t.pos);
        if (t.text == "true" || t.text == "True")
          e->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False")
          e->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None")
          e->value = Value::none();
        else
          e = make(Expr::Kind::name, t.pos, t.text);
        return e;
      }
      case Tok::Kind::str: {
        ExprPtr e = make(Expr::Kind::literal, t.pos);
        std::string s = t.text;
        while (peek().kind == Tok::Kind::str) s += next().text;  // adjacent literals join
        e->value = Value::string(s);
        return e;
      }
      case Tok::Kind::integer: {
        ExprPtr e = make(Expr::Kind::literal, t.pos);
        e->value = Value::integer(t.i);
        return e;
      }
      case Tok::Kind::number: {
        ExprPtr e = make(Expr::Kind::literal, t.pos);
        e->value = Value::number(t.d);
        return e;
      }
      case Tok::Kind::op:
        if (t.text == "(") {
          ExprPtr e = parse_expr();
          if (is_op(",")) fail(peek().pos, "unsupported construct 'tuple'");
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          ExprPtr e = make(Expr::Kind::list, t.pos);
          while (!is_op("]")) {
            e->args.push_back(parse_expr());
            if (!is_op(",")) break;
            ++at_;
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          ExprPtr e = make(Expr::Kind::dict, t.pos);
          while (!is_op("}")) {
            if (peek().kind != Tok::Kind::str) fail(peek().pos, "dict keys must be string literals");
            e->keys.push_back(next().text);
            expect_op(":");
            e->args.push_back(parse_expr());
            if (!is_op(",")) break;
            ++at_;
          }
          expect_op("}");
          return e;
        }
        break;
      default:
        break;
    }
    fail(t.pos, "expected an expression");
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().kind == Tok::Kind::name && is_op("=", 1)) {
        std::string key = next().text;
        ++at_;
        e.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (!e.kwargs.empty()) fail(peek().pos, "positional argument after a keyword argument");
        e.args.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++at_;
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        ++at_;
        const size_t pos = peek().pos;
        ExprPtr e = make(Expr::Kind::attr, pos, expect_name());
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else if (is_op("[")) {
        const size_t pos = next().pos;
        ExprPtr parts[3];
        int colons = 0;
        while (!is_op("]")) {
          if (is_op(":")) {
            if (++colons > 2) fail(peek().pos, "too many ':' in a slice");
            ++at_;
            continue;
          }
          if (parts[colons]) fail(peek().pos, "expected ':' or ']'");
          parts[colons] = parse_expr();
        }
        ++at_;
        ExprPtr e = make(colons ? Expr::Kind::slice : Expr::Kind::item, pos);
        if (!colons && !parts[0]) fail(pos, "empty subscript");
        e->args.push_back(std::move(node));
        for (int k = 0; k < (colons ? 3 : 1); ++k) e->args.push_back(std::move(parts[k]));
        node = std::move(e);
      } else if (is_op("(")) {
        const size_t pos = peek().pos;
        ExprPtr e = make(Expr::Kind::call, pos);
        if (node->kind == Expr::Kind::name) {
          if (!kGlobals.count(node->text))
            fail(node->pos, "unsupported function '" + node->text + "' (supported: " + join_names(kGlobals) + ")");
          e->text = node->text;
        } else if (node->kind == Expr::Kind::attr) {
          if (!kMethods.count(node->text))
            fail(node->pos, "unsupported method '" + node->text + "' (supported: " + join_names(kMethods) + ")");
          e->text = node->text;
          e->method = true;
          e->args.push_back(std::move(node->args[0]));
        } else {
          fail(pos, "unsupported call of a computed value");
        }
        parse_call_args(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        ++at_;
        const size_t pos = peek().pos;
        const std::string f = expect_name();
        if (!kFilters.count(f)) fail(pos, "unsupported filter '" + f + "' (supported: " + join_names(kFilters) + ")");
        ExprPtr e = make(Expr::Kind::filter, pos, f);
        e->args.push_back(std::move(node));
        if (is_op("(")) parse_call_args(*e);
        node = std::move(e);
      } else if (is_name("is")) {
        ++at_;
        bool negated = false;
        if (is_name("not")) {
          negated = true;
          ++at_;
        }
        const size_t pos = peek().pos;
        std::string t = peek().kind == Tok::Kind::name ? next().text : "";
        if (!kTests.count(t)) fail(pos, "unsupported test '" + t + "' (supported: " + join_names(kTests) + ")");
        ExprPtr e = make(Expr::Kind::test, pos, t);
        e->negated = negated;
        e->args.push_back(std::move(node));
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  std::vector<Tok> toks_;
  size_t at_ = 0;
  const std::string& src_;
  const std::string& name_;
  int max_nesting_;
  int depth_ = 0;
};

}  // namespace

std::string where(const std::string& source, size_t pos) {
  size_t line = 1, column = 1;
  for (size_t k = 0; k < pos && k < source.size(); ++k) {
    if (source[k] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

std::unique_ptr<Template> parse_template(const std::string& raw, const std::string& name, int max_nesting) {
  auto t = std::make_unique<Template>();
  // jinja2: \r\n and \r become \n, and one trailing newline is dropped (keep_trailing_newline off).
  std::string& src = t->source;
  for (size_t k = 0; k < raw.size(); ++k) {
    if (raw[k] == '\r') {
      src += '\n';
      if (k + 1 < raw.size() && raw[k + 1] == '\n') ++k;
    } else {
      src += raw[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Parser parser(lex_template(src, name), src, name, max_nesting);
  t->body = parser.parse_all();
  return t;
}

}  // namespace unstuck::tokenizer::jinja
