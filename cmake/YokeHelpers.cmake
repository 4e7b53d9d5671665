# Small helpers that keep target definitions short (STYLE.md #13).
#
# yoke_cc_library(NAME name SRCS ... DEPS ...)
# yoke_cc_test(NAME name SRCS ... DEPS ... [LABELS ...])
include_guard(GLOBAL)

function(yoke_cc_library)
  cmake_parse_arguments(Y "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(${Y_NAME} STATIC ${Y_SRCS})
  target_include_directories(${Y_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${Y_NAME} PUBLIC ${Y_DEPS})
endfunction()

function(yoke_cc_test)
  cmake_parse_arguments(Y "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT YOKE_BUILD_TESTS)
    return()
  endif()
  add_executable(${Y_NAME} ${Y_SRCS})
  target_link_libraries(${Y_NAME} PRIVATE ${Y_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  add_test(NAME ${Y_NAME} COMMAND ${Y_NAME})
  set(labels unit ${Y_LABELS})
  set_tests_properties(${Y_NAME} PROPERTIES LABELS "${labels}"
    # Tests share the cores (ctest -j): spinning OpenMP workers would starve
    # each other, so they sleep when idle. Benchmarks keep the default.
    ENVIRONMENT "YOKE_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive"
    TIMEOUT 600)
endfunction()
