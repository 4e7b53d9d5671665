#!/usr/bin/env python3
"""The folders include only what docs/architecture.md allows.

Reads the folder table of docs/architecture.md (folder | what it holds | what
it may include) and checks every #include "..." of the project's own code
against it, so that the table and the code cannot drift apart. Tests
(*_test.cc and testing/ folders) may include more, as the page says; so may
the folders whose third column says "anything".

Usage: layering_check.py [REPO_ROOT]    exit 1 listing each include the table forbids
       layering_check.py --self-test    proves the check fails on a planted include
"""
import os
import re
import shutil
import sys
import tempfile

ROW = re.compile(r"^\|\s*(`[^|]*`)\s*\|[^|]*\|\s*([^|]*)\|\s*$")
TICKED = re.compile(r"`([^`]+)`")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def read_table(root):
    """{folder: set of allowed path prefixes, or None for anything}."""
    rules = {}
    with open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8") as f:
        for line in f:
            m = ROW.match(line.rstrip("\n"))
            if not m:
                continue
            folders = [t for t in TICKED.findall(m.group(1)) if t.endswith("/")]
            allowed_text = m.group(2).strip()
            if allowed_text.startswith("anything"):
                allowed = None
            else:
                # Folders that share a row are one unit (api/ and include/yoke/).
                allowed = {t for t in TICKED.findall(allowed_text) if "/" in t} | set(folders)
            for folder in folders:
                rules[folder] = allowed
    return rules


def folder_of(path, folders):
    """The longest table folder that contains `path` (repo-relative), or None."""
    best = None
    for f in folders:
        if path.startswith(f) and (best is None or len(f) > len(best)):
            best = f
    return best


def target_of(include, folders):
    if include.startswith("yoke/"):  # the public headers, on the include path
        include = "include/" + include
    return folder_of(include, folders), include


def check(root):
    rules = read_table(root)
    if not rules:
        return ["docs/architecture.md: no folder table found"]
    folders = list(rules)
    problems = []
    for folder, allowed in sorted(rules.items()):
        if allowed is None:
            continue
        base = os.path.join(root, folder)
        for dirpath, dirnames, names in os.walk(base):
            rel_dir = os.path.relpath(dirpath, root) + "/"
            # A subfolder with its own row is checked under its own rule.
            if rel_dir != folder and folder_of(rel_dir, folders) != folder:
                continue
            if "/testing/" in "/" + rel_dir:
                continue
            for name in sorted(names):
                if not name.endswith((".cc", ".h", ".cu")) or name.endswith("_test.cc"):
                    continue
                rel = rel_dir + name
                with open(os.path.join(dirpath, name), encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for inc in INCLUDE.findall(text):
                    tfolder, full = target_of(inc, folders)
                    if tfolder is None or tfolder == folder:
                        continue
                    if any(full.startswith(a) for a in allowed):
                        continue
                    problems.append(f"{rel}: includes \"{inc}\", but docs/architecture.md lets "
                                    f"{folder} include only {', '.join(sorted(allowed)) or 'nothing of Yoke'}")
    return problems


def self_test():
    table = (
        "| folder | what it holds | what it may include |\n|---|---|---|\n"
        "| `common/` | base | nothing of Yoke |\n"
        "| `engine/` | the engine | `common/` |\n"
        "| `worker/` | the daemon | `common/` |\n"
        "| `tests/` | tests | anything |\n")
    files = {
        "docs/architecture.md": table,
        "common/a.h": "#pragma once\n",
        "engine/e.cc": '#include "engine/e.h"\n#include "common/a.h"\n',
        "worker/w.cc": '#include "common/a.h"\n',
        "worker/w_test.cc": '#include "engine/e.h"\n',
        "tests/t.cc": '#include "engine/e.h"\n#include "worker/w.h"\n',
    }
    failures = 0
    with tempfile.TemporaryDirectory() as root:
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        if check(root):
            print("self-test: the clean tree was refused:", check(root))
            failures += 1
        with open(os.path.join(root, "worker", "w.cc"), "a") as f:
            f.write('#include "engine/e.h"\n')
        got = check(root)
        if len(got) != 1 or "worker/w.cc" not in got[0]:
            print("self-test: a worker/ file including engine/ was not reported:", got)
            failures += 1
    print("layering_check self-test: " + ("ok" if not failures else f"{failures} failure(s)"))
    return 1 if failures else 0


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"layering_check: {len(problems)} include(s) the folder table forbids")
        return 1
    print("layering_check: every include is one docs/architecture.md allows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
