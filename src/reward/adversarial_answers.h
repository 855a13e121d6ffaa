// Private: answers built to be expensive for the math verifier (deep nesting, towers of powers,
// huge factorials and binomials, long digit strings, many braces), cut to a length limit. Shared
// by the adversarial test (tests/reward) and the worst-case measurement of `unstuck bench reward`.
#pragma once

#include <string>
#include <vector>

namespace unstuck::reward {

inline std::vector<std::string> adversarial_math_answers(size_t max_chars) {
  auto repeat = [](const std::string& s, size_t n) {
    std::string out;
    for (size_t i = 0; i < n; ++i) out += s;
    return out;
  };
  const size_t n = max_chars;  // enough repetitions to reach the limit
  std::vector<std::string> a = {
      "10^{10^{10}}",
      "9^{9^{9^{9^{9^{9^{9^{9}}}}}}}",
      "(10^{4000})^{4000}",
      "(2^{4000}+1)^{4}*(3^{2500}+1)^{4}",
      "1000!!!",
      repeat("1000!*", n / 6) + "1",
      repeat("\\binom{5000}{2500}", n / 18),
      "x^{4096}y^{4096}z^{4096}-(xyz)^{4096}",
      repeat("(x+1)^{4096}", n / 12),
      "2^{2^{2^{2^{2^{2^{2}}}}}}",
      "1e999999999",
      "0.1e-999999",
      std::string(n, '9'),
      "0." + std::string(n, '3'),
      std::string(n / 2, '9') + "/" + std::string(n / 2, '7'),
      repeat("{", n / 2) + "1" + repeat("}", n / 2),
      repeat("(", n / 2) + "1" + repeat(")", n / 2),
      repeat("[", n / 2) + "1" + repeat("]", n / 2),
      repeat("\\frac{1}{", n / 10) + "2" + repeat("}", n / 10),
      repeat("\\sqrt{", n / 7) + "2" + repeat("}", n / 7),
      repeat("-", n) + "1",
      repeat("x^", n / 2) + "x",
      repeat("2^", n / 2) + "2",
      repeat("1,", n / 2),
      repeat("x,", n / 2),
      repeat("\\{", n / 4) + repeat("\\}", n / 4),
      repeat("\\left(", n / 13) + repeat("\\right)", n / 13),
      repeat("\\pm 1", n / 5),
      repeat("(x+1)", n / 5),
      repeat("\\sin(", n / 6) + "1" + repeat(")", n / 6),
      repeat("\\begin{pmatrix}", n / 15),
      "\\begin{pmatrix}" + repeat("x&", n / 4) + "\\end{pmatrix}",
      repeat("\\text{", n / 7) + repeat("}", n / 7),
      repeat("1\\cup", n / 5),
      repeat("&\\\\", n / 3),
      repeat("x_", n / 2),
      repeat("\xe2\x88\x92", n / 3),
      repeat("\\frac", n / 5),
      repeat("^", n),
      repeat("!", n),
      repeat("=", n),
      repeat("x=", n / 2) + "1",
      repeat("\\,", n / 2),
  };
  for (std::string& s : a) {
    if (s.size() > max_chars) s.resize(max_chars);
  }
  return a;
}

}  // namespace unstuck::reward
