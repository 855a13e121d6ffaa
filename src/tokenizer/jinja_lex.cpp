// Lexer of the chat-template Jinja subset. It applies jinja2's whitespace rules as transformers
// configures them: trim_blocks (the newline after a block or comment tag is dropped), lstrip_blocks
// (spaces before a block or comment tag at a line start are dropped), `-` and `+` markers.
#include <cctype>
#include <string>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_lex.h"
#include "unstuck/common/error.h"

namespace unstuck::tokenizer::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  Lexer(const std::string& src, const std::string& name) : src_(src), name_(name) {}

  std::vector<Tok> run() {
    bool line_starting = true;  // jinja2: the previous tag's match ended with '\n'
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t open = pos;
      while (true) {
        open = src_.find('{', open);
        if (open == std::string::npos || open + 1 >= src_.size()) {
          open = std::string::npos;
          break;
        }
        const char c = src_[open + 1];
        if (c == '{' || c == '%' || c == '#') break;
        ++open;
      }
      if (open == std::string::npos) {
        push_text(src_.substr(pos), pos);
        break;
      }
      std::string text = src_.substr(pos, open - pos);
      const char type = src_[open + 1];
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && type != '{') {  // lstrip_blocks: blocks and comments only
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool blank = true;
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
          if (blank) text.resize(l_pos);
        }
      }
      push_text(text, pos);
      size_t p = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (type == '#') {
        const size_t close = src_.find("#}", p);
        if (close == std::string::npos) fail(open, "comment '{#' is never closed with '#}'");
        pos = tag_end(close, close + 2, '#', line_starting);
        continue;
      }
      if (type == '%') {
        size_t q = p;
        while (q < src_.size() && is_space(src_[q])) ++q;
        size_t e = q;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        const std::string word = src_.substr(q, e - q);
        if (word == "raw") fail(open, "unsupported statement 'raw'");
      }
      toks_.push_back({type == '{' ? Tok::Kind::var_begin : Tok::Kind::block_begin, "", 0, 0, open});
      pos = lex_tag(p, type, line_starting);
    }
    toks_.push_back({Tok::Kind::eof, "", 0, 0, src_.size()});
    return std::move(toks_);
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    throw UserError("chat template " + name_ + ": " + where(src_, pos) + ": " + what);
  }

  void push_text(const std::string& text, size_t pos) {
    if (!text.empty()) toks_.push_back({Tok::Kind::text, text, 0, 0, pos});
  }

  // The end marker at `marker` (its '-' / '+' sign sits just before it) ends at `after`; applies
  // `-` (skip all whitespace) or trim_blocks (skip one newline after a block or comment).
  size_t tag_end(size_t marker, size_t after, char type, bool& line_starting) {
    const char sign = marker > 0 ? src_[marker - 1] : '\0';
    size_t pos = after;
    if (sign == '-') {
      while (pos < src_.size() && is_space(src_[pos])) ++pos;
    } else if (sign != '+' && type != '{' && pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    }
    line_starting = pos > 0 && src_[pos - 1] == '\n';
    return pos;
  }

  size_t lex_tag(size_t p, char type, bool& line_starting) {
    int depth = 0;
    const std::string close = type == '{' ? "}}" : "%}";
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) fail(p, std::string("tag is never closed with '") + close + "'");
      if (depth == 0) {
        for (const char s : {'-', '+'}) {
          if (src_[p] == s && src_.compare(p + 1, 2, close) == 0) {
            if (s == '+' && type == '{') fail(p, "'+' is not allowed before '}}'");
            toks_.push_back({Tok::Kind::end, "", 0, 0, p});
            return tag_end(p + 1, p + 3, type, line_starting);
          }
        }
        if (src_.compare(p, 2, close) == 0) {
          toks_.push_back({Tok::Kind::end, "", 0, 0, p});
          return tag_end(p, p + 2, type, line_starting);
        }
      }
      const char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        toks_.push_back({Tok::Kind::name, src_.substr(p, e - p), 0, 0, p});
        p = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = p;
        while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
        const bool is_float =
            e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]));
        if (is_float) {
          ++e;
          while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
          toks_.push_back({Tok::Kind::number, "", 0, std::stod(src_.substr(p, e - p)), p});
        } else {
          if (e - p > 18) fail(p, "integer literal too long");
          toks_.push_back({Tok::Kind::integer, "", std::stoll(src_.substr(p, e - p)), 0, p});
        }
        p = e;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* kOps[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%",
                                     "~",  "|",  ".",  ",",  ":",  "(",  ")", "[", "]", "{", "}", "="};
        std::string op;
        for (const char* o : kOps) {
          if (src_.compare(p, std::char_traits<char>::length(o), o) == 0) {
            op = o;
            break;
          }
        }
        if (op.empty()) fail(p, std::string("unexpected character '") + c + "'");
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") --depth;
        toks_.push_back({Tok::Kind::op, op, 0, 0, p});
        p += op.size();
      }
    }
  }

  size_t lex_string(size_t p) {
    const char quote = src_[p];
    std::string out;
    size_t q = p + 1;
    while (q < src_.size() && src_[q] != quote) {
      if (src_[q] == '\\' && q + 1 < src_.size()) {
        const char e = src_[++q];
        switch (e) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case '\\':
            out += '\\';
            break;
          case '\'':
            out += '\'';
            break;
          case '"':
            out += '"';
            break;
          case '\n':
            break;
          default:
            fail(q - 1, std::string("unsupported string escape '\\") + e + "'");
        }
        ++q;
      } else {
        out += src_[q++];
      }
    }
    if (q >= src_.size()) fail(p, "string literal is never closed");
    toks_.push_back({Tok::Kind::str, out, 0, 0, p});
    return q + 1;
  }

  const std::string& src_;
  const std::string& name_;
  std::vector<Tok> toks_;
};

}  // namespace

std::vector<Tok> lex_template(const std::string& src, const std::string& name) { return Lexer(src, name).run(); }

}  // namespace unstuck::tokenizer::jinja
