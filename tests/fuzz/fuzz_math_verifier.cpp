// libFuzzer target: the math verifier's public API (answer extraction and numeric comparison).
#include "fuzz_verifiers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  return fuzz_verifier("math", data, size);
}
