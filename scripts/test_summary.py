#!/usr/bin/env python3
"""The suite's closing summary: what was skipped, and why.

ctest counts a GoogleTest binary whose cases called GTEST_SKIP as passed, so a
CPU-only machine would hide a skipped kernel path. This reads the XML reports
that every yoke_cc_test writes (GTEST_OUTPUT, cmake/YokeHelpers.cmake) and
ctest's JUnit report (--output-junit), and prints each skipped case or test
with its reason. It never changes the suite's exit status.

Usage: test_summary.py BUILD_DIR
"""
import glob
import os
import sys
import xml.etree.ElementTree as ET


def gtest_skips(results_dir):
    """(test binary, case, reason) for every GTEST_SKIP in the reports."""
    skips = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.xml"))):
        binary = os.path.basename(path)[: -len(".xml")]
        try:
            root = ET.parse(path).getroot()
        except ET.ParseError as e:
            skips.append((binary, "(report)", f"unreadable report: {e}"))
            continue
        for case in root.iter("testcase"):
            skipped = case.find("skipped")
            if case.get("result") != "skipped" and skipped is None:
                continue
            reason = (skipped.get("message") if skipped is not None else "") or ""
            # GoogleTest puts "file:line\n" before the message.
            reason = reason.strip().splitlines()[-1] if reason.strip() else "no reason given"
            skips.append((binary, f"{case.get('classname')}.{case.get('name')}", reason))
    return skips


def ctest_skips(junit_path):
    """(test, reason) for tests ctest itself reports skipped or not run."""
    if not os.path.exists(junit_path):
        return []
    skips = []
    for case in ET.parse(junit_path).getroot().iter("testcase"):
        status = case.get("status", "run")
        if status in ("run", "fail"):
            continue
        skipped = case.find("skipped")
        reason = skipped.get("message", "") if skipped is not None else ""
        out = case.find("system-out")
        text = (out.text or "") if out is not None else ""
        last = [l for l in text.strip().splitlines() if l.strip()]
        skips.append((case.get("name"), f"{status}: {reason or (last[-1] if last else 'no output')}"))
    return skips


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    build = sys.argv[1]
    g = gtest_skips(os.path.join(build, "test-results"))
    c = ctest_skips(os.path.join(build, "test-results", "ctest.junit.xml"))
    if not g and not c:
        print("test summary: nothing was skipped")
        return 0
    print(f"test summary: {len(c)} test(s) and {len(g)} case(s) were skipped:")
    for name, reason in c:
        print(f"  skipped test  {name}: {reason}")
    for binary, case, reason in g:
        print(f"  skipped case  {binary}  {case}: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
