// Private to the chat-template code: the tokens of a Jinja template (text between tags, tag
// delimiters, and the names, literals and operators inside tags) after jinja2's whitespace rules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace unstuck::tokenizer::jinja {

struct Tok {
  enum class Kind { text, var_begin, block_begin, end, name, str, integer, number, op, eof };
  Kind kind = Kind::eof;
  std::string text;
  int64_t i = 0;
  double d = 0.0;
  size_t pos = 0;
};

// Tokens of `src` (newlines already normalized); trim_blocks and lstrip_blocks on, as transformers
// sets them. Throws UserError "chat template <name>: line L, column C: ..." for an unclosed tag,
// comment or string, an unknown character, or a `{% raw %}` block.
std::vector<Tok> lex_template(const std::string& src, const std::string& name);

}  // namespace unstuck::tokenizer::jinja
