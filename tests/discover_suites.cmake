# Registers a GoogleTest executable with ctest as one test per test suite (run after the executable
# is built: tests/CMakeLists.txt, unstuck_add_test_dir). A suite's tests share one process, as
# they share their SetUpTestSuite fixtures (a trained base model, a started worker pool): one
# process per test repeated that work and libtorch's start-up for each of ~560 tests, and made the
# test run several times longer than the tests themselves.
#   cmake -D EXECUTABLE=... -D CTEST_FILE=... -D LABEL=... -D SOURCE_DIR=... -D WORKDIR=... -P discover_suites.cmake
execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests
  OUTPUT_VARIABLE listing RESULT_VARIABLE rc TIMEOUT 120 ERROR_VARIABLE errors)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${rc}): ${errors}")
endif()
string(REPLACE "\n" ";" lines "${listing}")
set(script "")
foreach(line IN LISTS lines)
  # A suite is a line that starts at column 0 and names "Suite." (typed or parameterized suites
  # add "  # TypeParam = ..." after it); its tests are the indented lines below it.
  if(line MATCHES "^([^ #][^ ]*)\\.")
    set(suite "${CMAKE_MATCH_1}")
    set(name "${LABEL}/${suite}")
    string(APPEND script
      "add_test([==[${name}]==] [==[${EXECUTABLE}]==] [==[--gtest_filter=${suite}.*]==])\n"
      "set_tests_properties([==[${name}]==] PROPERTIES LABELS [==[${LABEL}]==] TIMEOUT 1200"
      " WORKING_DIRECTORY [==[${WORKDIR}]==] ENVIRONMENT [==[UNSTUCK_SOURCE_DIR=${SOURCE_DIR}]==])\n")
  endif()
endforeach()
if(script STREQUAL "")
  message(FATAL_ERROR "${EXECUTABLE} lists no test suite")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
