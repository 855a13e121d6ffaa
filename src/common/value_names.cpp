// Values as configs print them (unstuck/common/value_names.h).
#include "unstuck/common/value_names.h"

#include <charconv>
#include <cmath>

namespace unstuck {

std::string format_double(double x) {
  if (std::isnan(x)) return ".nan";
  if (std::isinf(x)) return x > 0 ? ".inf" : "-.inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, x);  // shortest exact round trip
  std::string text(buf, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";  // visibly a real number
  return text;
}

}  // namespace unstuck
