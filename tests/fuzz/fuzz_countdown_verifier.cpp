// libFuzzer target: the countdown verifier's public API (expression parsing and the number rules).
#include "fuzz_verifiers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return fuzz_verifier("countdown", data, size);
}
