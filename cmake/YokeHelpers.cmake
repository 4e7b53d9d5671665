# Small helpers that keep target definitions short.
#
# yoke_cc_library(NAME name SRCS ... DEPS ...)
# yoke_cc_test(NAME name SRCS ... DEPS ... [LABELS ...])
# yoke_test_pch()
include_guard(GLOBAL)

function(yoke_cc_library)
  cmake_parse_arguments(Y "" "NAME" "SRCS;DEPS" ${ARGN})
  add_library(${Y_NAME} STATIC ${Y_SRCS})
  target_include_directories(${Y_NAME} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${Y_NAME} PUBLIC ${Y_DEPS})
endfunction()

# A test file's optimization level (see yoke_cc_test).
function(yoke_test_compile_options target)
  if(YOKE_FUZZ)
    target_compile_options(${target} PRIVATE -O0)
  elseif(CMAKE_BUILD_TYPE STREQUAL "Release")
    target_compile_options(${target} PRIVATE -O1)
  endif()
  # clang refuses (or crashes on) a precompiled header built with other
  # language options, and g++ one built with other macros: with it, every
  # test compiles with -pthread, OpenMP and spdlog's definitions, as the
  # gRPC-linked and engine-linked ones already do.
  if(YOKE_TEST_PCH)
    target_compile_options(${target} PRIVATE -pthread)
    target_link_libraries(${target} PRIVATE OpenMP::OpenMP_CXX spdlog::spdlog)
  endif()
endfunction()

# yoke_test_pch(): with YOKE_TEST_PCH, the precompiled header every test
# file then starts from (cmake/testing/test_precompiled.h: gtest, gmock, gRPC,
# protobuf, Abseil, spdlog, the standard library and the generated protos).
# It is built once, by an empty test-like executable whose flags every
# yoke_cc_test shares (REUSE_FROM needs them equal). The sanitized build
# turns it on (Makefile): its test files compile at -O0, where parsing those
# headers was most of the time (tests/multihost_crash_e2e_test.cc: 14.5 s ->
# 9.4 s with clang). The release build leaves it off, so a test file that
# forgets an include still fails to compile there.
function(yoke_test_pch)
  if(NOT (YOKE_BUILD_TESTS AND YOKE_TEST_PCH))
    return()
  endif()
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/yoke_test_pch_main.cc
       CONTENT "int main() { return 0; }\n")
  add_executable(yoke_test_pch ${PROJECT_BINARY_DIR}/yoke_test_pch_main.cc)
  target_include_directories(yoke_test_pch PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(yoke_test_pch PRIVATE yoke_grpc_proto yoke_proto gRPC::grpc++
    protobuf::libprotobuf spdlog::spdlog absl::status absl::statusor absl::strings
    GTest::gtest GTest::gmock)
  yoke_test_compile_options(yoke_test_pch)
  target_precompile_headers(yoke_test_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/testing/test_precompiled.h)
endfunction()

function(yoke_cc_test)
  cmake_parse_arguments(Y "" "NAME" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT YOKE_BUILD_TESTS)
    return()
  endif()
  add_executable(${Y_NAME} ${Y_SRCS})
  target_link_libraries(${Y_NAME} PRIVATE ${Y_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  # A test's own file is compiled with less optimization than the code under
  # test, which the libraries hold: test files were 60% of the build, mostly
  # gtest and gRPC templates. Release: -O1 instead of -O3 (config_test.cc
  # 18.4 s -> 11.3 s with g++). Sanitized build: -O0 instead of -O1
  # (22.0 s -> 9.8 s with clang, ASan and UBSan).
  yoke_test_compile_options(${Y_NAME})
  if(TARGET yoke_test_pch)
    target_precompile_headers(${Y_NAME} REUSE_FROM yoke_test_pch)
  endif()
  add_test(NAME ${Y_NAME} COMMAND ${Y_NAME})
  # Labels say what a test is: `unit` (in one process, or with the project's
  # own binaries as children), `e2e` (whole daemons and the CLI), `slow`,
  # `gpu` (needs a CUDA device; skips visibly without), `root` (network
  # namespaces), `parity` (against PyTorch), `multihost`, `deploy`, `tree`
  # (tests/CMakeLists.txt: checks of the repository's files). A test is
  # `unit` unless it is labelled e2e or parity.
  set(labels ${Y_LABELS})
  if(NOT ("e2e" IN_LIST labels OR "parity" IN_LIST labels))
    list(PREPEND labels unit)
  endif()
  set_tests_properties(${Y_NAME} PROPERTIES LABELS "${labels}"
    # Tests share the cores (ctest -j): spinning OpenMP workers would starve
    # each other, so they sleep when idle. Benchmarks keep the default.
    # GTEST_OUTPUT: each test's XML report, where scripts/test_summary.py
    # finds the cases that skipped (GTEST_SKIP) and says why.
    ENVIRONMENT "YOKE_SOURCE_DIR=${PROJECT_SOURCE_DIR};OMP_NUM_THREADS=2;OMP_WAIT_POLICY=passive;GTEST_OUTPUT=xml:${PROJECT_BINARY_DIR}/test-results/${Y_NAME}.xml"
    TIMEOUT 600)
endfunction()

# yoke_cc_folder(NAME name TEST_PREFIX prefix DEPS ... [TEST_DEPS ...])
# A folder that is one library: every *.cc of the calling directory but the
# tests and *_main.cc is the library NAME, and every *_test.cc is a test named
# <prefix>_<file> that links NAME and TEST_DEPS. A new file needs no edit here.
function(yoke_cc_folder)
  cmake_parse_arguments(Y "" "NAME;TEST_PREFIX" "DEPS;TEST_DEPS" ${ARGN})
  file(GLOB srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  list(FILTER srcs EXCLUDE REGEX "(_test|_main)\\.cc$")
  yoke_cc_library(NAME ${Y_NAME} SRCS ${srcs} DEPS ${Y_DEPS})
  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  foreach(t ${tests})
    get_filename_component(n ${t} NAME_WE)
    yoke_cc_test(NAME ${Y_TEST_PREFIX}_${n} SRCS ${t} DEPS ${Y_NAME} ${Y_TEST_DEPS})
  endforeach()
endfunction()
