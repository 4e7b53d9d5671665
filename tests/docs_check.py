#!/usr/bin/env python3
"""Checks that the docs name only things that exist.

  docs_check.py [REPO_ROOT]    fails (exit 1) listing each problem as
                               FILE:LINE: MESSAGE; REPO_ROOT defaults to the
                               folder above this script's folder
  docs_check.py --self-test    proves the check can fail: writes a small
                               fake tree into a temporary folder, expects it
                               to pass, then plants one bad reference of each
                               kind and expects each to be reported

What counts as a problem:

1. A doc (every *.md outside build folders) or a code comment (*.cc, *.h,
   *.cu, *.proto, CMakeLists.txt, *.cmake, BUILD.bazel, *.bzl, *.sh, *.py,
   *.yaml, Makefile) names a docs/*.md file that does not exist.
2. A doc names a repository path that does not exist: a word such as
   `engine/checkpoint.h` or `collective/nccl/` whose first component is a
   top-level folder of the repository; a relative Markdown link target; a
   Markdown anchor (`job_spec.md#training`) that no heading of that file
   makes; a Bazel package (`//worker:yoke-worker`). Code comments are checked
   for paths too. Not checked: URLs, absolute paths (/usr/...), paths under
   build folders (build/, bazel-bin/), $VARS, placeholders (<dir>, DIR, ...).
   Globs (`engine/*.cc`) and braces (`x.{h,cc}`) must match at least one file.
   A link may not leave the repository.
3. A doc names a command-line flag that the Yoke binary it is given to does
   not accept. Flags are checked in code blocks and `inline code` whose
   command is yoke, yoke-coordinator, yoke-worker or yoke-trainer (a path
   such as build/bin/yoke is fine), and as a lone `--flag` in backticks when
   its paragraph names a Yoke command and no other program. The binaries
   parse their arguments with common::FlagParser (common/flags.h), which
   matches names exactly (no dash/underscore translation) and answers --help
   and -h itself; `yoke --version` is the version command. The flags are read
   from the FlagParser declarations (.String("--name,-n", ...)) and any
   ABSL_FLAG in each binary's folder; `yoke` also passes every yoke-trainer
   flag through (`yoke train` runs yoke-trainer).

Python 3 standard library only.
"""

import fnmatch
import os
import re
import subprocess
import sys
import tempfile

# Top-level folders that the repository once had. A path into one of them is
# stale even though the folder is gone (and so no longer a top-level folder).
RETIRED_TOP_LEVEL = {"server"}

# Never read: build outputs and caches (also whatever .gitignore names at the
# root), version control, vendored stand-ins.
ALWAYS_SKIPPED_DIRS = {".git", "__pycache__", "node_modules"}
CODE_SKIPPED_TOP = {"third_party"}

CODE_SUFFIXES = (".cc", ".h", ".cu", ".proto", ".cmake", ".bzl", ".sh", ".py", ".yaml", ".yml")
CODE_NAMES = ("CMakeLists.txt", "BUILD.bazel", "BUILD", "Makefile", "WORKSPACE", "Dockerfile",
              ".bazelrc")
# Also any file whose first line is a #! line (scripts without a suffix,
# such as .ci/run) and systemd units.
CODE_EXTRA_SUFFIXES = (".service",)

YOKE_SUBCOMMANDS = ("train", "validate", "submit", "jobs", "get", "watch", "logs", "cancel",
                    "workers", "up", "down", "certs", "token", "version", "help", "export",
                    "predict")

# Where each binary's flags are declared (folders, non-test *.cc). `yoke
# train` executes yoke-trainer with its own arguments, and `yoke export` and
# `yoke predict` execute yoke-model (export/).
BINARY_SOURCES = {
    "yoke": ["client", "trainer", "export"],
    "yoke-coordinator": ["coordinator"],
    "yoke-worker": ["worker"],
    "yoke-trainer": ["trainer"],
}
BUILTIN_FLAGS = {"--help", "-h"}
EXTRA_FLAGS = {"yoke": {"--version"}}

# Programs other than Yoke's: a paragraph naming one of them is not clearly
# about Yoke's flags.
OTHER_PROGRAMS = re.compile(
    r"(?i)(?<![\w-])(?:bazel|cmake|ctest|ninja|git|docker|dockerd|kubectl|kustomize|"
    r"kubernetes-validate|pip3?|python3?|torchrun|tensorboard|debootstrap|curl|openssl|"
    r"nvcc|clang\+*|gcc|g\+\+|ld|nm|gdb|perf|systemctl|journalctl|apt(?:-get)?|"
    r"ssh|scp|rsync|grpcurl|prometheus)(?![\w-])"
    r"|(?<![\w-])make (?:build|test|demo|bench|bazel-test|docker-test|k8s-validate|fuzz|"
    r"test-asan|clean|deps)\b"
    r"|[\w./-]*\w\.(?:py|sh)\b|\b\w+_bench\b|\bscripts/[\w.-]+|\bbench/[\w./-]+"
    r"|\byoke-make-image-folder\b|\bmake-image-folder\b|\byoke_parity_dump\b"
    r"|\bcollective_test_rank\b")

YOKE_COMMAND = re.compile(
    r"(?<![\w.-])(?:[\w.-]*/)*(yoke-coordinator|yoke-worker|yoke-trainer|yoke)(?![\w-]|\.\w)")

FLAG_TOKEN = re.compile(r"^(--?[A-Za-z][\w-]*)")
DOCS_MD = re.compile(r"(?<![\w./-])((?:\.\./)*docs/[\w./-]*?\.md)\b")
MD_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
BAZEL_LABEL = re.compile(r"(?<![\w/@])//([\w./-]*)(?::([\w.+-]+))?")
URL = re.compile(r"\b[a-zA-Z][\w+.-]*://\S+")
PLACEHOLDER_COMPONENT = re.compile(r"^(?:[A-Z][A-Z0-9_]*|<.*>|\.\.\.|.*[$%<>@].*)$")
GENERATED = re.compile(r"\.(?:grpc\.)?pb\.(?:h|cc)$")


class Repo:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.ignored = self._root_ignores()
        self.files = set()  # every file, relative, '/'-separated
        self.dirs = set()   # every folder holding a file, relative
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            rel = "" if rel == "." else rel
            dirnames[:] = sorted(d for d in dirnames
                                 if d not in ALWAYS_SKIPPED_DIRS and
                                 not (rel == "" and self.is_ignored_top(d)))
            for f in filenames:
                path = f"{rel}/{f}" if rel else f
                self.files.add(path)
                parts = path.split("/")
                for i in range(1, len(parts)):
                    self.dirs.add("/".join(parts[:i]))
        self.top = {d.split("/")[0] for d in self.dirs} | RETIRED_TOP_LEVEL

    def _root_ignores(self):
        pats = [".cache"]
        try:
            with open(os.path.join(self.root, ".gitignore"), encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("/") and not line.startswith("#"):
                        pats.append(line.strip("/"))
        except OSError:
            pass
        return pats

    def is_ignored_top(self, name):
        return any(fnmatch.fnmatchcase(name, p) for p in self.ignored)

    def exists(self, rel):
        rel = rel.strip("/")
        return rel == "" or rel in self.files or rel in self.dirs

    def glob_matches(self, pattern):
        pattern = pattern.rstrip("/")
        return any(fnmatch.fnmatchcase(p, pattern) for p in self.files | self.dirs)

    def read(self, rel):
        with open(os.path.join(self.root, rel), encoding="utf-8", errors="replace") as f:
            return f.read()


def expand_braces(text):
    m = re.search(r"\{([^{}]*)\}", text)
    if not m:
        return [text]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(text[:m.start()] + alt + text[m.end():]))
    return out


def normalize(path):
    parts = []
    for p in path.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if not parts:
                return None  # above the repository
            parts.pop()
        else:
            parts.append(p)
    return "/".join(parts)


class Checker:
    def __init__(self, root):
        self.repo = Repo(root)
        self.problems = []
        self.seen = set()
        self.flags = self._collect_flags()
        self.all_flags = set().union(*self.flags.values())
        self.anchor_cache = {}

    # ---- reporting --------------------------------------------------------

    def report(self, rel, line, message):
        key = (rel, line, message)
        if key not in self.seen:
            self.seen.add(key)
            self.problems.append(f"{rel}:{line}: {message}")

    # ---- flags the binaries accept ---------------------------------------

    def _collect_flags(self):
        decl = re.compile(r"(?:\.|->)(?:String|Strings|Bool|Int|Duration|Milliseconds|Bytes|Custom)\(\s*\"([^\"]+)\"")
        absl_flag = re.compile(r"ABSL_FLAG\(\s*[^,]+,\s*(\w+)\s*,")
        flags = {}
        for binary, sources in BINARY_SOURCES.items():
            names = set(BUILTIN_FLAGS) | EXTRA_FLAGS.get(binary, set())
            for src in sources:
                files = [src] if src.endswith(".cc") else sorted(
                    f for f in self.repo.files
                    if f.startswith(src + "/") and f.count("/") == src.count("/") + 1 and
                    f.endswith(".cc") and not f.endswith("_test.cc"))
                for f in files:
                    if f not in self.repo.files:
                        continue
                    text = self.repo.read(f)
                    for m in decl.finditer(text):
                        names.update(n.strip() for n in m.group(1).split(",") if n.strip())
                    for m in absl_flag.finditer(text):
                        names.add("--" + m.group(1))
            flags[binary] = names
        return flags

    # ---- paths -------------------------------------------------------------

    def check_repo_path(self, rel, line, token, base_dir=""):
        """Checks `token`, a path relative to the repository root."""
        token = token.strip()
        if not token or token.startswith("/"):
            return
        for cand in expand_braces(token):
            parts = cand.split("/")
            kept = []
            for p in parts:
                if PLACEHOLDER_COMPONENT.match(p) and p not in ("", "."):
                    break
                kept.append(p)
            placeholder_cut = len(kept) < len(parts)
            path = normalize("/".join(kept))
            if path is None:
                self.report(rel, line, f"'{token}' points outside the repository")
                continue
            if not path:
                continue
            first = path.split("/")[0]
            if self.repo.is_ignored_top(first):
                continue
            if GENERATED.search(path) and not placeholder_cut:
                path = GENERATED.sub(".proto", path)
            if any(c in path for c in "*?["):
                if not self.repo.glob_matches(path):
                    self.report(rel, line, f"'{token}' matches no file in the repository")
                continue
            if not self.repo.exists(path) and not self.names_program(path):
                what = f"'{token}'" + (f" (folder '{path}')" if placeholder_cut else "")
                self.report(rel, line, f"{what} does not exist")

    def names_program(self, path):
        """Whether `path`, with no extension, names a test or program built
        from a source beside it (engine/model_test, bench/allreduce_bench)."""
        if "." in path.split("/")[-1]:
            return False
        return any(path + ext in self.repo.files
                   for ext in (".cc", "_main.cc", ".sh", ".py", ".cu"))

    def scan_text_paths(self, rel, line, text, in_code=False):
        """Words in `text` that start with a top-level folder. In a code
        comment, words in quotes (example messages, keys) and words with a
        placeholder are left alone."""
        text = URL.sub(" ", text)
        for m in re.finditer(r"(?<![\w./~$@:%{=-])([.\w-]+)/([\w./*?{},<>-]*)", text):
            first = m.group(1)
            if first not in self.repo.top:
                continue
            token = first + "/" + m.group(2)
            if in_code:
                if text[:m.start()].count('"') % 2 or text[m.end():].count('"') % 2:
                    continue
                if any(PLACEHOLDER_COMPONENT.match(p) for p in token.split("/")[1:] if p):
                    continue
            token = token.rstrip(".,:;")
            if "{" in token and "}" not in token:
                continue
            if token.count("{") != token.count("}"):
                continue
            if "//" in token or token.endswith("..."):
                continue
            if DOCS_MD.fullmatch(token):
                continue  # scan_docs_md reports it
            self.check_repo_path(rel, line, token)

    def scan_docs_md(self, rel, line, text, base_dir):
        for m in DOCS_MD.finditer(URL.sub(" ", text)):
            target = m.group(1)
            resolved = normalize(f"{base_dir}/{target}" if target.startswith("../") else target)
            if resolved is None or not self.repo.exists(resolved):
                self.report(rel, line, f"names {target}, which does not exist")

    def scan_bazel_labels(self, rel, line, text):
        for m in BAZEL_LABEL.finditer(URL.sub(" ", text)):
            pkg, target = m.group(1), m.group(2)
            if pkg.startswith("...") or "<" in pkg or pkg.endswith("..."):
                continue
            pkg = pkg.rstrip("/").rstrip(".")
            if pkg.endswith("/..."):
                pkg = pkg[:-4]
            if not pkg or pkg.split("/")[0] not in self.repo.top:
                continue
            if self.repo.is_ignored_top(pkg.split("/")[0]):
                continue
            build = next((f"{pkg}/{b}" for b in ("BUILD.bazel", "BUILD")
                          if f"{pkg}/{b}" in self.repo.files), None)
            if build is None:
                self.report(rel, line, f"Bazel package //{pkg} does not exist")
                continue
            if target and "<" not in target and not self._bazel_target_exists(pkg, build, target):
                self.report(rel, line, f"//{pkg}:{target}: no such target in {build}")

    def _bazel_target_exists(self, pkg, build, target):
        if f'"{target}"' in self.repo.read(build):
            return True
        # yoke_cc_tests (bazel/yoke.bzl) names a test after its file, in any
        # folder of the package (//engine:dense_test: engine/layers/dense_test.cc).
        if f"{pkg}/{target}" in self.repo.files:
            return True
        return any(f.startswith(pkg + "/") and f.endswith("/" + target + ".cc")
                   for f in self.repo.files)

    # ---- Markdown ------------------------------------------------------------

    def anchors_of(self, rel):
        if rel in self.anchor_cache:
            return self.anchor_cache[rel]
        anchors, counts, in_code = set(), {}, False
        for raw in self.repo.read(rel).splitlines():
            if raw.lstrip().startswith("```"):
                in_code = not in_code
                continue
            if in_code:
                continue
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", raw)
            if not m:
                continue
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
            slug = re.sub(r"[^\w\- ]", "", text.replace("`", "").lower()).replace(" ", "-")
            n = counts.get(slug, 0)
            counts[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
        for m in re.finditer(r"<a\s+(?:name|id)=\"([^\"]+)\"", self.repo.read(rel)):
            anchors.add(m.group(1))
        self.anchor_cache[rel] = anchors
        return anchors

    def check_link(self, rel, line, target, base_dir):
        if URL.match(target) or target.startswith(("mailto:", "http:", "https:")):
            return
        path, _, anchor = target.partition("#")
        if not path:
            resolved = rel
        else:
            if path.startswith("/"):
                self.report(rel, line, f"link '{target}' is absolute; use a relative path")
                return
            resolved = normalize(f"{base_dir}/{path}" if base_dir else path)
            if resolved is None:
                self.report(rel, line, f"link '{target}' points outside the repository")
                return
            if self.repo.is_ignored_top(resolved.split("/")[0]):
                self.report(rel, line, f"link '{target}' points into a build folder")
                return
            if not self.repo.exists(resolved):
                self.report(rel, line, f"link '{target}': {resolved} does not exist")
                return
        if anchor and resolved.endswith(".md") and resolved in self.repo.files:
            if anchor not in self.anchors_of(resolved):
                self.report(rel, line, f"link '{target}': no heading makes #{anchor}")

    def check_markdown(self, rel):
        base_dir = os.path.dirname(rel)
        lines = self.repo.read(rel).splitlines()
        # Paragraphs (runs of non-blank lines outside code), for flag context.
        para_of, paras, cur, in_code = {}, [], [], False
        code_lines = set()
        for i, raw in enumerate(lines, 1):
            if raw.lstrip().startswith("```"):
                in_code = not in_code
                code_lines.add(i)
                if cur:
                    paras.append(cur)
                    cur = []
                continue
            if in_code:
                code_lines.add(i)
                continue
            if raw.strip():
                cur.append(i)
            elif cur:
                paras.append(cur)
                cur = []
        if cur:
            paras.append(cur)
        for p in paras:
            text = "\n".join(lines[i - 1] for i in p)
            for i in p:
                para_of[i] = text

        for i, raw in enumerate(lines, 1):
            if "../shared" in raw:
                self.report(rel, i, "mentions ../shared, which is outside the repository")
            self.scan_docs_md(rel, i, raw, base_dir)
            self.scan_bazel_labels(rel, i, raw)
            self.scan_text_paths(rel, i, raw)
            if i not in code_lines:
                for m in MD_LINK.finditer(raw):
                    self.check_link(rel, i, m.group(1), base_dir)
                self.check_inline_flags(rel, i, raw, para_of.get(i, raw))
        self.check_code_block_flags(rel, lines, code_lines)

    # ---- flags in docs ---------------------------------------------------------

    def check_command_flags(self, rel, line, words):
        """`words` start right after a Yoke binary's name (words[0] is it)."""
        binary = words[0]
        accepted = self.flags[binary]
        subcommand = words[1] if len(words) > 1 else ""
        for w in words[1:]:
            w = w.strip("[](){}|,;'\"")
            if w == "--":
                break
            m = FLAG_TOKEN.match(w)
            if not m:
                continue
            flag = m.group(1)
            if flag not in accepted:
                where = binary + (f" {subcommand}" if binary == "yoke" and
                                  subcommand in YOKE_SUBCOMMANDS else "")
                self.report(rel, line, f"{where}: no such flag {flag}")

    def command_words(self, segment):
        """The words of `segment` from its Yoke command on, or None."""
        words = segment.split()
        i = 0
        while i < len(words) and (re.match(r"^[A-Za-z_]\w*=", words[i]) or
                                  words[i] in ("$", "#", "sudo", "exec", "env", "time", "nohup")):
            i += 1
        if i >= len(words):
            return None
        m = YOKE_COMMAND.fullmatch(words[i])
        if not m:
            return None
        if m.group(1) == "yoke" and (i + 1 >= len(words) or
                                     words[i + 1] not in YOKE_SUBCOMMANDS and
                                     not words[i + 1].startswith("-")):
            return None
        return [m.group(1)] + words[i + 1:]

    def check_code_block_flags(self, rel, lines, code_lines):
        i, n = 1, len(lines)
        while i <= n:
            if i not in code_lines or lines[i - 1].lstrip().startswith("```"):
                i += 1
                continue
            start, text = i, lines[i - 1]
            while text.rstrip().endswith("\\") and i + 1 <= n and i + 1 in code_lines:
                i += 1
                text = text.rstrip()[:-1] + " " + lines[i - 1]
            text = re.sub(r"(^|\s)#\s.*$", "", text)  # a shell comment
            for seg in re.split(r"\s\|\s|&&|\|\||;|\$\(|`", text):
                words = self.command_words(seg.replace(")", " "))
                if words:
                    self.check_command_flags(rel, start, words)
            i += 1

    def check_inline_flags(self, rel, line, raw, paragraph):
        for m in re.finditer(r"`([^`]+)`", raw):
            span = m.group(1).strip()
            words = self.command_words(span)
            if words:
                self.check_command_flags(rel, line, words)
                continue
            fm = FLAG_TOKEN.match(span)
            if not fm or not span.startswith("--"):
                continue
            context = re.sub(r"`--[^`]*`", " ", paragraph).replace("`", " ")
            mentions_yoke = any(self.command_words(context[c.start():])
                                for c in YOKE_COMMAND.finditer(context))
            if not mentions_yoke or OTHER_PROGRAMS.search(context):
                continue
            if fm.group(1) not in self.all_flags:
                self.report(rel, line, f"no Yoke binary accepts {fm.group(1)}")

    # ---- code comments ---------------------------------------------------------

    def comments(self, rel):
        """(line, comment text) for each comment line of a code file."""
        text = self.repo.read(rel)
        name = os.path.basename(rel)
        c_like = name.endswith((".cc", ".h", ".cu", ".proto"))
        out, in_block = [], False
        for i, raw in enumerate(text.splitlines(), 1):
            if c_like:
                if in_block:
                    end = raw.find("*/")
                    out.append((i, raw if end < 0 else raw[:end]))
                    in_block = end < 0
                    continue
                code = strip_strings(raw)
                pos = code.find("//")
                blk = code.find("/*")
                if blk >= 0 and (pos < 0 or blk < pos):
                    end = raw.find("*/", blk + 2)
                    out.append((i, raw[blk + 2:] if end < 0 else raw[blk + 2:end]))
                    in_block = end < 0
                elif pos >= 0:
                    out.append((i, raw[pos + 2:]))
            else:
                code = strip_strings(raw)
                pos = code.find("#")
                if pos >= 0 and (pos == 0 or code[pos - 1] in " \t"):
                    if pos + 1 < len(raw) and raw[pos + 1] == "!" and i == 1:
                        continue  # the #! line
                    out.append((i, raw[pos + 1:]))
        return out

    def is_script(self, rel):
        with open(os.path.join(self.repo.root, rel), "rb") as f:
            return f.read(2) == b"#!"

    def check_code(self, rel):
        for line, comment in self.comments(rel):
            self.scan_docs_md(rel, line, comment, "")
            self.scan_text_paths(rel, line, comment, in_code=True)

    # ---- the walk ----------------------------------------------------------------

    def run(self):
        for rel in sorted(self.repo.files):
            name = os.path.basename(rel)
            top = rel.split("/")[0]
            if name.endswith(".md"):
                self.check_markdown(rel)
            elif top not in CODE_SKIPPED_TOP and (
                    name.endswith(CODE_SUFFIXES + CODE_EXTRA_SUFFIXES) or name in CODE_NAMES or
                    ("." not in name and self.is_script(rel))):
                self.check_code(rel)
        return self.problems


def strip_strings(line):
    """`line` with the insides of "..." and '...' blanked (same length)."""
    out, quote, i = [], None, 0
    while i < len(line):
        c = line[i]
        if quote:
            if c == "\\" and i + 1 < len(line):
                out.append("  ")
                i += 2
                continue
            if c == quote:
                quote = None
                out.append(c)
            else:
                out.append(" ")
        else:
            if c in "\"'" and not (c == "'" and i > 0 and line[i - 1].isalnum()):
                quote = c
            out.append(c)
        i += 1
    return "".join(out)


def check(root):
    return Checker(root).run()


# ---- self-test -------------------------------------------------------------------

FAKE_TREE = {
    ".gitignore": "/build/\n/bazel-*\n",
    "README.md": """# Fake

See [the architecture](docs/architecture.md) and docs/protocol.md; the
engine lives in `engine/checkpoint.h`, its kernels in engine/kernels/ and
every source in `engine/*.cc` or `engine/{checkpoint,tensor}.h`.

```sh
build/bin/yoke up --workers 2 --detach
ID=$(build/bin/yoke submit configs/job.yaml --set training.epochs=1)
build/bin/yoke-trainer --spec-file job.pb --world-size 2 \\
    --gloo-hostname 10.0.0.5
cmake --build build --target everything --parallel 2
bazel test //... --test_output=errors
kubectl apply -k deploy/k8s --dry-run=client
```

Not checked: https://example.com/engine/nothing.h, /usr/share/engine/x.h,
build/bin/engine/, $BUILD/engine/none.h, engine/<dir>/, engine/OUT/x.h.
`yoke-worker --advertise-address ADDR` and `--tls-dir` with `yoke up`.
Bazel links with `--as-needed` (`//engine:checkpoint`).
""",
    "docs/architecture.md": "# Architecture\n\n## Parts\n\nSee [protocol](protocol.md#messages).\n",
    "docs/protocol.md": "# Protocol\n\n## Messages\n\nNothing.\n",
    "engine/checkpoint.h": "// Checkpoints (docs/architecture.md).\n",
    "engine/tensor.h": "// Tensors; see engine/checkpoint.h.\n",
    "engine/kernels/cpu.cc": "int x;  // engine/kernels/\n",
    "engine/BUILD.bazel": 'cc_library(name = "checkpoint")  # docs/protocol.md\n',
    "configs/job.yaml": "model: {}\n",
    "deploy/k8s/kustomization.yaml": "resources: []\n",
    "client/commands.cc": 'p.Strings("--set", &s).Int("--workers", &w).Bool("--detach,-d", &d)'
                          '.String("--tls-dir", &t);\n',
    "coordinator/coordinator_main.cc": 'p.String("--listen", &l);\n',
    "worker/worker_main.cc": 'p.String("--advertise-address", &a);\n',
    "trainer/trainer_main.cc": 'p.String("--spec-file", &s).Int("--world-size", &w)'
                               '.String("--gloo-hostname", &g);\n',
    "CMakeLists.txt": "# The build (docs/architecture.md, engine/checkpoint.h).\n",
}

PLANTED = [
    ("a missing docs/*.md in a doc", "README.md", "\nRead docs/missing.md.\n",
     "names docs/missing.md, which does not exist"),
    ("a missing docs/*.md in a code comment", "engine/tensor.h", "// docs/gone.md\n",
     "names docs/gone.md, which does not exist"),
    ("a missing repo path", "docs/architecture.md", "\nThe store: `engine/store.h`.\n",
     "'engine/store.h' does not exist"),
    ("a missing path in a code comment", "CMakeLists.txt", "# see server/old.cc\n",
     "'server/old.cc' does not exist"),
    ("a broken link", "docs/architecture.md", "\n[x](../engine/nope.h)\n",
     "engine/nope.h does not exist"),
    ("a broken anchor", "README.md", "\n[y](docs/protocol.md#no-such-part)\n",
     "no heading makes #no-such-part"),
    ("a missing Bazel package", "README.md", "\nBuild `//server:yoke-coordinator`.\n",
     "Bazel package //server does not exist"),
    ("an unknown flag in a code block", "README.md",
     "\n```sh\nbuild/bin/yoke submit configs/job.yaml --bogus-flag 1\n```\n",
     "yoke submit: no such flag --bogus-flag"),
    ("an unknown flag inline", "docs/protocol.md",
     "\nRun `yoke-coordinator --listen X --store-dir D`.\n",
     "yoke-coordinator: no such flag --store-dir"),
    ("a lone unknown flag", "docs/protocol.md",
     "\nStart `yoke up` with `--no-such-thing`.\n",
     "no Yoke binary accepts --no-such-thing"),
]


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def self_test():
    failures = []
    with tempfile.TemporaryDirectory(prefix="docs_check_self_test_") as tmp:
        clean = os.path.join(tmp, "clean")
        write_tree(clean, FAKE_TREE)
        problems = check(clean)
        if problems:
            failures.append("the clean tree should pass, got:\n  " + "\n  ".join(problems))
        # The check as a program, too: exit 0 on the clean tree.
        rc = subprocess.run([sys.executable, os.path.abspath(__file__), clean],
                            stdout=subprocess.DEVNULL).returncode
        if rc != 0:
            failures.append(f"the clean tree: exit {rc}, expected 0")
        for what, rel, extra, expected in PLANTED:
            tree = os.path.join(tmp, re.sub(r"\W+", "_", what))
            files = dict(FAKE_TREE)
            files[rel] = files.get(rel, "") + extra
            write_tree(tree, files)
            problems = check(tree)
            if not any(rel + ":" in p and expected in p for p in problems):
                failures.append(f"{what}: expected '{rel}:...: {expected}', got "
                                f"{problems or 'nothing'}")
            elif len(problems) != 1:
                failures.append(f"{what}: expected one problem, got {problems}")
            else:
                print(f"docs_check self-test: {what}: reported as {problems[0]}")
            if what == PLANTED[0][0]:
                rc = subprocess.run([sys.executable, os.path.abspath(__file__), tree],
                                    stdout=subprocess.DEVNULL).returncode
                if rc != 1:
                    failures.append(f"{what}: exit {rc}, expected 1")
    if failures:
        print("docs_check self-test FAILED:\n" + "\n".join(failures))
        return 1
    print(f"docs_check self-test: the clean tree passes and all {len(PLANTED)} planted "
          "references are reported")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith("-")):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    root = argv[1] if len(argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(root):
        print(f"docs_check: no such folder: {root}", file=sys.stderr)
        return 2
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"docs_check: {len(problems)} problem(s)")
        return 1
    print("docs_check: every docs/*.md, repository path, link and Yoke flag the docs name "
          "exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
