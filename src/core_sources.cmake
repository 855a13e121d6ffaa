# Sources of the libtorch-free core (unstuck_core) and their per-file flags, shared by
# src/CMakeLists.txt and the instrumented core-only build (tests/core_only: fuzzing, sanitizers).
set(UNSTUCK_SRC_DIR ${CMAKE_CURRENT_LIST_DIR})
file(GLOB UNSTUCK_CORE_SOURCES CONFIGURE_DEPENDS
  ${UNSTUCK_SRC_DIR}/common/*.cpp ${UNSTUCK_SRC_DIR}/config/*.cpp ${UNSTUCK_SRC_DIR}/log/*.cpp
  ${UNSTUCK_SRC_DIR}/precision/*.cpp ${UNSTUCK_SRC_DIR}/data/*.cpp ${UNSTUCK_SRC_DIR}/reward/*.cpp
  ${UNSTUCK_SRC_DIR}/tokenizer/*.cpp ${UNSTUCK_SRC_DIR}/io/*.cpp ${UNSTUCK_SRC_DIR}/model/param_layout.cpp
  ${UNSTUCK_SRC_DIR}/model/cpu_kernels.cpp ${UNSTUCK_SRC_DIR}/rollout/sample_kernel.cpp
  ${UNSTUCK_SRC_DIR}/dist/launch_env.cpp
  ${UNSTUCK_SRC_DIR}/model/hf_config.cpp ${UNSTUCK_SRC_DIR}/train/memory_plan.cpp
  ${UNSTUCK_SRC_DIR}/train/memory_knobs.cpp)
# The weight formats keep device buffers and count on the device with libtorch: in unstuck_torch.
list(REMOVE_ITEM UNSTUCK_CORE_SOURCES ${UNSTUCK_SRC_DIR}/precision/weight_format.cpp)

# Kernel files: ISA flags per file, and no floating-point contraction anywhere in the kernels, so
# scalar, AVX2, AVX-512 and CUDA paths produce identical bits (-ffp-contract=off on the target).
set_source_files_properties(${UNSTUCK_SRC_DIR}/precision/kernels_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mf16c")
# The model's and the sampler's CPU kernels: -fno-trapping-math lets GCC turn the selects around their
# exp (a clamp, a -inf test) into blends without AVX-512's masks, so their AVX2 and SSE clones
# vectorize (the sampler's scan was scalar code on an AVX2-only CPU without it); no value changes (no
# reassociation, no contraction).
set_source_files_properties(${UNSTUCK_SRC_DIR}/model/cpu_kernels.cpp ${UNSTUCK_SRC_DIR}/rollout/sample_kernel.cpp
  PROPERTIES COMPILE_OPTIONS "-fno-trapping-math")
set_source_files_properties(${UNSTUCK_SRC_DIR}/precision/kernels_avx512.cpp PROPERTIES
  COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx2;-mf16c;-Wno-maybe-uninitialized")

# The Python reward worker (reward/worker_pool.h), compiled into the core as a string.
file(READ ${UNSTUCK_SRC_DIR}/reward/reward_worker.py UNSTUCK_REWARD_WORKER_PY)
configure_file(${UNSTUCK_SRC_DIR}/reward/reward_worker_py.cpp.in ${CMAKE_CURRENT_BINARY_DIR}/reward_worker_py.cpp @ONLY)
list(APPEND UNSTUCK_CORE_SOURCES ${CMAKE_CURRENT_BINARY_DIR}/reward_worker_py.cpp)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${UNSTUCK_SRC_DIR}/reward/reward_worker.py)
# The code verifier's judge of assert-style tests (src/reward/assert_judge.h), likewise.
file(READ ${UNSTUCK_SRC_DIR}/reward/assert_judge.py UNSTUCK_ASSERT_JUDGE_PY)
configure_file(${UNSTUCK_SRC_DIR}/reward/assert_judge_py.cpp.in ${CMAKE_CURRENT_BINARY_DIR}/assert_judge_py.cpp @ONLY)
list(APPEND UNSTUCK_CORE_SOURCES ${CMAKE_CURRENT_BINARY_DIR}/assert_judge_py.cpp)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${UNSTUCK_SRC_DIR}/reward/assert_judge.py)
