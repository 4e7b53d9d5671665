#!/usr/bin/env python3
"""deploy/docker/Dockerfile copies every folder the top-level CMakeLists.txt
builds, so that moving code into a new folder cannot break the image build
(which only CI's `make docker-test` would otherwise notice, many minutes in).

Usage: dockerfile_check.py [REPO_ROOT]   exit 1 naming each folder not copied
       dockerfile_check.py --self-test   proves the check fails on a missing COPY
"""
import os
import re
import sys
import tempfile

# Built by the top-level CMakeLists.txt but not part of the image's build:
# the image configures with tests and benchmarks off.
NOT_IN_IMAGE = {"tests", "bench", "tests/fuzz"}


def check(root):
    with open(os.path.join(root, "CMakeLists.txt")) as f:
        cmake = f.read()
    with open(os.path.join(root, "deploy", "docker", "Dockerfile")) as f:
        docker = f.read()
    folders = re.findall(r"^\s*add_subdirectory\(([^)\s]+)\)", cmake, re.M)
    copied = set()
    for m in re.finditer(r"^COPY\s+(?!--from)(.+)$", docker, re.M):
        parts = m.group(1).split()
        copied.update(p.rstrip("/") for p in parts[:-1])
    return [f"deploy/docker/Dockerfile: no COPY of {d}/, which CMakeLists.txt builds "
            f"(add_subdirectory({d}))" for d in folders if d not in NOT_IN_IMAGE and d not in copied]


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "deploy", "docker"))
        with open(os.path.join(root, "CMakeLists.txt"), "w") as f:
            f.write("add_subdirectory(common)\nadd_subdirectory(trainer)\nadd_subdirectory(tests)\n")
        docker = os.path.join(root, "deploy", "docker", "Dockerfile")
        with open(docker, "w") as f:
            f.write("FROM x AS build\nCOPY common common\nCOPY trainer trainer\n")
        if check(root):
            print("self-test: a complete Dockerfile was refused:", check(root))
            return 1
        with open(docker, "w") as f:
            f.write("FROM x AS build\nCOPY common common\n")
        got = check(root)
        if len(got) != 1 or "trainer/" not in got[0]:
            print("self-test: a missing COPY of trainer/ was not reported:", got)
            return 1
    print("dockerfile_check self-test: ok")
    return 0


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("dockerfile_check: the image copies every folder the build needs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
