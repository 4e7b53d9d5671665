"""Builds yoke-client: the gRPC stubs are generated from the repository's
proto/ (never checked in), and the version is read from common/version.h,
the constant the CLI and the coordinator use."""

import re
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VERSION_H = REPO / "common" / "version.h"
PROTO_DIR = REPO / "proto" / "yoke" / "v1"
PACKAGE = "yoke_client"


def version_constants():
    text = VERSION_H.read_text(encoding="utf-8")
    found = dict(re.findall(r'constexpr char (k\w+)\[\] = "([0-9.]+)";', text))
    want = ("kYokeVersion", "kMinClientVersion", "kMinCoordinatorVersion")
    missing = [k for k in want if k not in found]
    if missing:
        raise SystemExit(f"{VERSION_H}: no {', '.join(missing)}")
    return found


def generate_stubs(out_pkg: Path):
    """proto/yoke/v1/*.proto -> yoke_client/_proto/yoke/v1/*_pb2{,_grpc}.py{,i}.

    protoc names the modules after the import paths (proto.yoke.v1); they are
    generated in a scratch tree and their imports moved under yoke_client._proto.
    """
    from grpc_tools import protoc  # a build requirement (pyproject.toml)
    import grpc_tools

    protos = sorted(PROTO_DIR.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files in {PROTO_DIR}: build from a Yoke checkout")
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{REPO}", f"-I{well_known}", f"--python_out={tmp}",
                f"--pyi_out={tmp}", f"--grpc_python_out={tmp}"]
        args += [str(p.relative_to(REPO)) for p in protos]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed on " + " ".join(args[5:]))
        dest = out_pkg / "_proto" / "yoke" / "v1"
        dest.mkdir(parents=True, exist_ok=True)
        for d in (out_pkg / "_proto", out_pkg / "_proto" / "yoke", dest):
            (d / "__init__.py").write_text("", encoding="utf-8")
        for f in sorted((Path(tmp) / "proto" / "yoke" / "v1").iterdir()):
            text = f.read_text(encoding="utf-8")
            text = re.sub(r"\bfrom proto\.yoke\.v1 import", f"from {PACKAGE}._proto.yoke.v1 import",
                          text)
            text = re.sub(r"\bimport proto\.yoke\.v1\.(\w+)",
                          rf"import {PACKAGE}._proto.yoke.v1.\1", text)
            text = text.replace("proto.yoke.v1.", f"{PACKAGE}._proto.yoke.v1.")
            (dest / f.name).write_text(text, encoding="utf-8")


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        out_pkg = Path(self.build_lib) / PACKAGE
        generate_stubs(out_pkg)
        v = version_constants()
        (out_pkg / "_version.py").write_text(
            "# Generated from common/version.h when the package was built.\n"
            f'VERSION = "{v["kYokeVersion"]}"\n'
            f'MIN_COORDINATOR_VERSION = "{v["kMinCoordinatorVersion"]}"\n',
            encoding="utf-8")


setup(version=version_constants()["kYokeVersion"], cmdclass={"build_py": BuildPyWithStubs})
