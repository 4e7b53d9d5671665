#!/usr/bin/env python3
"""Event files from telemetry/tensorboard.cc, read by TensorBoard itself.

tests/tensorboard_write_tool writes 100,000 scalars over four tags and one
text summary; TensorBoard's EventAccumulator (size_guidance 0: keep every
event) reads the file back. Checks:
  * every scalar is there, in step order, equal as a float32 to the value the
    tool wrote (float(step) / 7 + tag * 0.5, recomputed here in float32);
  * the text summary is a tensor of the "text" plugin holding the markdown;
  * TensorBoard logged no CRC, checksum or truncation message (its reader
    logs a bad CRC at DEBUG level and stops reading the file there, so every
    logger is captured at DEBUG).
Before that, a self-check proves the capture works: a copy of the file with
one byte flipped must make TensorBoard log a CRC failure.

  tests/tensorboard_read_test.py --tool build/bin/tensorboard_write_tool

tensorboard comes from $YOKE_VENV (/opt/yoke/venv; scripts/install-deps.sh
installs it): this script re-runs itself with that venv's python. Without
tensorboard there it prints SKIP and exits 77 (ctest: SKIP_RETURN_CODE).
"""

import argparse
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
TAGS = 4
TEXT_TAG = "job/config"
# As kText in tests/tensorboard_write_tool.cc.
TEXT = "# Job\n\n| key | value |\n|---|---|\n| lr | `0.1` |\n\nünïcode ✓"
CRC_WORDS = re.compile(r"crc|checksum|truncat|data ?loss", re.IGNORECASE)
REEXEC = "_YOKE_TENSORBOARD_READ_TEST_REEXEC"


def fail(msg):
    print(f"tensorboard_read_test: FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def import_tensorboard_or_reexec():
    try:
        import tensorboard  # noqa: F401
        return
    except ImportError:
        pass
    venv = os.environ.get("YOKE_VENV", "/opt/yoke/venv")
    python = os.path.join(venv, "bin", "python3")
    if os.environ.get(REEXEC) != "1" and os.access(python, os.X_OK):
        os.environ[REEXEC] = "1"
        os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    print(f"SKIP: the Python package tensorboard is not installed (looked in "
          f"{sys.executable} and {python}); run scripts/install-deps.sh")
    sys.exit(SKIP)


class Capture(logging.Handler):
    """Keeps every log record, from every logger, at every level."""

    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(f"{record.name}:{record.levelname}: {record.getMessage()}")

    def crc_messages(self):
        return [m for m in self.messages if CRC_WORDS.search(m)]


def load(path):
    from tensorboard.backend.event_processing import event_accumulator as ea
    acc = ea.EventAccumulator(path, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    return acc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool", required=True, help="tensorboard_write_tool binary")
    parser.add_argument("--scalars", type=int, default=100_000)
    args = parser.parse_args()
    import_tensorboard_or_reexec()
    import numpy as np
    import tensorboard

    capture = Capture()
    logging.captureWarnings(True)
    for name in ("", "tensorboard", "absl"):
        logger = logging.getLogger(name)
        logger.addHandler(capture)
        logger.setLevel(logging.DEBUG)
    logging.getLogger("tensorboard").propagate = False  # counted once

    tmp = tempfile.mkdtemp(prefix="tensorboard_read_test.",
                           dir=os.environ.get("TEST_TMPDIR"))
    try:
        t0 = time.monotonic()
        out = subprocess.run([args.tool, os.path.join(tmp, "run"), str(args.scalars), str(TAGS)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"{args.tool} exited {out.returncode}: {out.stderr}")
        path = out.stdout.strip()
        write_s = time.monotonic() - t0
        if "tfevents" not in os.path.basename(path):
            fail(f"{path}: TensorBoard only reads files whose names contain 'tfevents'")

        # Self-check: a flipped byte in the middle is a CRC failure in the log.
        corrupt = os.path.join(tmp, "corrupt.out.tfevents.0")
        shutil.copyfile(path, corrupt)
        with open(corrupt, "r+b") as f:
            f.seek(os.path.getsize(corrupt) // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x01]))
        bad = load(corrupt)
        if not capture.crc_messages():
            fail("self-check: TensorBoard read a corrupted file and the captured log has no "
                 f"CRC message ({len(capture.messages)} messages captured)")
        bad_count = sum(len(bad.Scalars(t)) for t in bad.Tags()["scalars"])
        if bad_count >= args.scalars:
            fail(f"self-check: all {bad_count} scalars read from the corrupted file")
        print(f"self-check: a flipped byte is reported ({capture.crc_messages()[0]}); "
              f"{bad_count} of {args.scalars} scalars read before it")
        capture.messages.clear()

        t0 = time.monotonic()
        acc = load(path)
        read_s = time.monotonic() - t0

        crc = capture.crc_messages()
        if crc:
            fail(f"TensorBoard logged {len(crc)} CRC/truncation messages, first: {crc[0]}")

        tags = sorted(acc.Tags()["scalars"])
        want_tags = [f"tag{t}" for t in range(TAGS)]
        if tags != want_tags:
            fail(f"scalar tags {tags}, want {want_tags}")
        total = 0
        bad_values = []
        for t, tag in enumerate(want_tags):
            events = acc.Scalars(tag)
            want_n = len(range(t, args.scalars, TAGS))
            if len(events) != want_n:
                fail(f"{tag}: {len(events)} scalars read, {want_n} written")
            for step, e in enumerate(events):
                want = float(np.float32(step) / np.float32(7) + np.float32(t) * np.float32(0.5))
                if e.step != step or e.value != want:
                    bad_values.append(f"{tag} #{step}: step {e.step} value {e.value!r}, "
                                      f"want step {step} value {want!r}")
            total += len(events)
        if bad_values:
            fail(f"{len(bad_values)} scalars differ, first: {bad_values[:3]}")
        if total != args.scalars:
            fail(f"{total} scalars read, {args.scalars} written")

        if TEXT_TAG not in acc.Tags()["tensors"]:
            fail(f"no tensor tagged {TEXT_TAG}: tensors {acc.Tags()['tensors']}")
        if TEXT_TAG not in acc.PluginTagToContent("text"):
            fail(f"{TEXT_TAG} is not a text-plugin tag: {acc.PluginTagToContent('text')}")
        texts = acc.Tensors(TEXT_TAG)
        if len(texts) != 1 or texts[0].step != 0:
            fail(f"{TEXT_TAG}: {len(texts)} events, want one at step 0")
        proto = texts[0].tensor_proto
        if proto.dtype != 7 or list(proto.string_val) != [TEXT.encode()]:
            fail(f"{TEXT_TAG}: dtype {proto.dtype} string_val {list(proto.string_val)!r}")

        print(f"tensorboard {tensorboard.__version__}: {total} scalars over {TAGS} tags and one "
              f"text summary read back exactly from {os.path.getsize(path)} bytes; "
              f"no CRC message in {len(capture.messages)} log records; "
              f"write {write_s:.2f} s, read {read_s:.2f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
