#!/usr/bin/env python3
"""Size limits for the project's own C++: no source file over 600 lines, and
no function over 120 lines unless a comment at its top says why (a comment
just above the signature, or on the body's first line, that says
"over 120 lines" and gives the reason).

Usage: size_check.py [REPO_ROOT]      exit 1 listing each violation
       size_check.py --self-test      proves the check fails on planted cases
       size_check.py --report ROOT    every function over 80 lines, longest first
"""
import os
import re
import subprocess
import sys
import tempfile

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120
SOURCE_DIRS = ("api", "bench", "client", "collective", "common", "config", "configs",
               "coordinator", "data", "engine", "examples", "include", "jobspec", "net",
               "security", "telemetry", "tests", "trainer", "worker")
EXTENSIONS = (".cc", ".h", ".cu")
REASON = re.compile(r"over 120 lines", re.IGNORECASE)
NOT_FUNCTION = re.compile(
    r"(^|\W)(namespace|class|struct|union|enum|extern\s+\"C\"|switch|if|for|while|do|else|try|catch)\b[^;]*$")


def strip(text):
    """Comments, string and char literals blanked out; newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(text):
    """(first line, last line, name) of each function body at namespace or class scope."""
    code = strip(text)
    lines_before = [0]
    for ch in code:
        lines_before.append(lines_before[-1] + (ch == "\n"))
    found, stack, start = [], [], 0  # stack: 'scope' or ('fn', line, name)
    for i, ch in enumerate(code):
        if ch == "{":
            in_fn = any(isinstance(s, tuple) for s in stack)
            head = code[start:i]
            head_flat = " ".join(head.split())
            if not in_fn and ")" in head and not NOT_FUNCTION.search(head_flat.split("(")[0]) \
                    and not head_flat.rstrip().endswith("="):
                name = head_flat.split("(")[0].split()[-1] if head_flat.split("(")[0].split() else "?"
                sig_line = lines_before[start + len(head) - len(head.lstrip())] + 1
                stack.append(("fn", sig_line, name))
            else:
                stack.append("scope")
            start = i + 1
        elif ch == "}":
            if stack:
                top = stack.pop()
                if isinstance(top, tuple):
                    found.append((top[1], lines_before[i] + 1, top[2]))
            start = i + 1
        elif ch == ";" and not any(isinstance(s, tuple) for s in stack):
            start = i + 1
    return found


def has_reason(lines, first, end):
    above = lines[max(0, first - 5):first - 1]
    body = lines[first - 1:min(len(lines), first + 3)]
    return any(REASON.search(l) for l in above + body)


def check(root, report=False):
    problems, long_ones = [], []
    for d in SOURCE_DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for fname in sorted(names):
                if not fname.endswith(EXTENSIONS):
                    continue
                path = os.path.join(dirpath, fname)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                lines = text.split("\n")
                count = len(lines) - (1 if text.endswith("\n") else 0)
                if count > MAX_FILE_LINES:
                    problems.append(f"{rel}: {count} lines (at most {MAX_FILE_LINES})")
                for first, last, name in functions(text):
                    length = last - first + 1
                    long_ones.append((length, rel, first, name))
                    if length > MAX_FUNCTION_LINES and not has_reason(lines, first, last):
                        problems.append(f"{rel}:{first}: {name} is {length} lines (at most "
                                        f"{MAX_FUNCTION_LINES} without a comment at its top "
                                        f"that says why it is over 120 lines)")
    if report:
        for length, rel, first, name in sorted(long_ones, reverse=True):
            if length > 80:
                print(f"{length:5d}  {rel}:{first}  {name}")
    return problems


def self_test():
    long_body = "\n".join(f"  x += {i};" for i in range(130))
    cases = {
        "long_function": (f"int F(int x) {{\n{long_body}\n  return x;\n}}\n", 1),
        "long_function_with_reason": (
            f"// One table of 130 cases: over 120 lines, since splitting it hides the order.\n"
            f"int F(int x) {{\n{long_body}\n  return x;\n}}\n", 0),
        "long_method_in_class": (
            f"namespace a {{\nclass C {{\n public:\n  int F(int x) {{\n{long_body}\n"
            f"    return x;\n  }}\n}};\n}}  // namespace a\n", 1),
        "long_file": ("\n".join("int v%d = 0;" % i for i in range(601)) + "\n", 1),
        "short_with_lambda_and_braces_in_strings": (
            "namespace {\nvoid G() {\n  auto f = [] { return \"}}}\"; };\n  f();\n}\n}\n", 0),
    }
    failures = 0
    for name, (src, want) in cases.items():
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "common"))
            with open(os.path.join(root, "common", name + ".cc"), "w") as f:
                f.write(src)
            got = len(check(root))
            if got != want:
                print(f"self-test {name}: {got} problem(s), want {want}")
                failures += 1
    print("size_check self-test: " + ("ok" if not failures else f"{failures} failure(s)"))
    return 1 if failures else 0


def main(argv):
    if argv[1:2] == ["--self-test"]:
        return self_test()
    report = argv[1:2] == ["--report"]
    args = argv[2:] if report else argv[1:]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = check(root, report)
    for p in problems:
        print(p)
    if problems:
        print(f"size_check: {len(problems)} problem(s)")
        return 1
    print("size_check: every file and function is within its limit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
