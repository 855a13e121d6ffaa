// The judge of assert-style code tests (src/reward/assert_judge.py), compiled in as a string by
// src/core_sources.cmake so that the binary runs it wherever it is installed.
#pragma once

namespace unstuck::reward {

const char* assert_judge_source();

}  // namespace unstuck::reward
