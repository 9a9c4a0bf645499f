#!/usr/bin/env python3
"""Regenerates the protobuf/gRPC stubs under ``fairway/_proto`` from ``proto/``.

Run it with an interpreter that has ``grpcio-tools==GRPCIO_TOOLS_VERSION``
installed (an older protoc on purpose: its generated code runs on every
protobuf runtime from 3.20 to 7.x, see README.md)::

    python tools/generate_protos.py [--out DIR]

The one normalisation applied to protoc's output: the generated modules
import each other as ``fairway.v1.*`` (the proto package), which inside this
distribution is ``fairway._proto.fairway.v1.*``; the import lines and the
module names given to the builder are rewritten accordingly. Nothing else is
touched, so the checked-in files are protoc's output byte for byte apart
from those prefixes (``tests/test_stubs.py`` checks it).
"""

from __future__ import annotations

import argparse
import re
import pathlib
import sys

GRPCIO_TOOLS_VERSION = "1.49.1"
PROTOS = ("fairway/v1/matching.proto", "fairway/v1/schedules.proto", "fairway/v1/visits.proto")
HERE = pathlib.Path(__file__).resolve().parent
PACKAGE_ROOT = HERE.parent  # clients/python
REPO_ROOT = PACKAGE_ROOT.parent.parent
PREFIX = "fairway._proto."


def normalise(text: str) -> str:
    text = text.replace("from fairway.v1 import ", f"from {PREFIX}fairway.v1 import ")
    text = re.sub(r"'fairway\.v1\.(\w+_pb2)'", rf"'{PREFIX}fairway.v1.\1'", text)
    return text


def generate(out: pathlib.Path, proto_root: pathlib.Path = REPO_ROOT / "proto") -> list[pathlib.Path]:
    import grpc_tools
    from grpc_tools import protoc

    installed = getattr(grpc_tools, "__version__", None)
    if installed is None:
        from importlib.metadata import version

        installed = version("grpcio-tools")
    if installed != GRPCIO_TOOLS_VERSION:
        raise SystemExit(f"grpcio-tools {installed} is installed; the stubs are made with {GRPCIO_TOOLS_VERSION}")
    out.mkdir(parents=True, exist_ok=True)
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{proto_root}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *PROTOS,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    written = []
    for path in sorted((out / "fairway" / "v1").glob("*.py*")):
        path.write_text(normalise(path.read_text()))
        written.append(path)
    for package in (out / "fairway", out / "fairway" / "v1"):
        (package / "__init__.py").write_text("")
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=PACKAGE_ROOT / "fairway" / "_proto")
    args = parser.parse_args()
    for path in generate(args.out):
        print(path)


if __name__ == "__main__":
    sys.exit(main())
