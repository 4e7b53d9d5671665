#!/usr/bin/env python3
"""The ninja targets a filtered ctest run needs, so a build can make only those.

Asks ctest (--show-only=json-v1, with the given selection arguments) which
tests it would run, and prints, one per line, the ninja targets they need:
each test named after its executable target (every yoke_cc_test), and every
file of the build tree that a test's command line names (the tools a script
test runs, the archives the ODR check reads), relative to BUILD_DIR. ninja
builds each with what it depends on (the e2e tests depend on the daemons).
It works before the first build: ctest leaves out the command of a test
whose binary does not exist yet, but the test's name still names it.
`make test-asan` builds only these, not the binaries of the tests its
selection leaves out (the slow, multi-host, parity and GPU ones).

Exits 2 with a message if ctest fails or selects no test.

Usage: test_targets.py BUILD_DIR [CTEST_ARG ...]
"""
import json
import os
import subprocess
import sys


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    build = os.path.abspath(argv[1])
    proc = subprocess.run(["ctest", "--show-only=json-v1", *argv[2:]], cwd=build,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"test_targets: ctest failed in {build}: {proc.stderr.strip()}", file=sys.stderr)
        return 2
    tests = json.loads(proc.stdout).get("tests", [])
    listing = subprocess.run(["ninja", "-C", build, "-t", "targets", "all"],
                             capture_output=True, text=True)
    known = {line.split(":")[0] for line in listing.stdout.splitlines()}
    targets = []
    for test in tests:
        if test["name"] in known and test["name"] not in targets:
            targets.append(test["name"])
        for word in test.get("command", []):
            if word.startswith(build + os.sep):
                rel = os.path.relpath(word, build)
                # A folder of the build tree (a test's --bin DIR) is no target.
                if rel in known and rel not in targets:
                    targets.append(rel)
    if not targets:
        print(f"test_targets: the selection {argv[2:]} names no target of {build}",
              file=sys.stderr)
        return 2
    print("\n".join(targets))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
