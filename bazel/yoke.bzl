"""Helpers that keep Yoke's BUILD files short, like cmake/YokeHelpers.cmake.

yoke_cc_tests: one cc_test per *_test.cc, named after the file (dense_test for
engine/layers/dense_test.cc), so a new test file needs no BUILD edit.
"""

# Test data every test may read through its runfiles: the example job files
# (tests find them as $YOKE_SOURCE_DIR/configs/*.yaml, and .bazelrc sets
# YOKE_SOURCE_DIR to the runfiles root).
_TEST_DATA = ["//configs:job_files"]

def yoke_cc_tests(srcs, deps, data = [], tags = [], timeout = "long", **kwargs):
    """Declares one cc_test for each file in srcs.

    Args:
      srcs: the *_test.cc files (usually a glob).
      deps: libraries every test links; gtest/gmock with main() are added.
      data: extra runfiles, beside the example configs.
      tags: tags for every test.
      timeout: Bazel timeout class; "long" (15 min) matches ctest's 600 s limit
        with room for a loaded 2-core machine.
      **kwargs: passed to every cc_test.
    """
    for src in srcs:
        name = src.split("/")[-1][:-len(".cc")]
        native.cc_test(
            name = name,
            srcs = [src],
            deps = deps + ["//third_party:gtest_main"],
            data = data + _TEST_DATA,
            tags = tags,
            timeout = timeout,
            **kwargs
        )
