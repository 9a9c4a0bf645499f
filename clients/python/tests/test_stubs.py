"""The checked-in stubs are what tools/generate_protos.py makes from proto/ now.

The generator needs grpcio-tools at the pinned version, which must not be
installed next to the protobuf versions under test: it runs with the Python
of ``$FAIRWAY_PROTOC_PYTHON`` (scripts/test-python.sh makes that venv), else
in a venv this test makes under ``<repo>/.deploy/python/protoc``.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import venv

from conftest import REPO

PACKAGE = REPO / "clients" / "python"
sys.path.insert(0, str(PACKAGE / "tools"))
import generate_protos  # noqa: E402


def generator_python() -> str:
    given = os.environ.get("FAIRWAY_PROTOC_PYTHON")
    if given:
        return given
    home = REPO / ".deploy" / "python" / "protoc"
    python = home / "bin" / "python"
    if not python.exists():
        venv.create(home, with_pip=True)
    check = subprocess.run(
        [str(python), "-c", "import grpc_tools, importlib.metadata as m; print(m.version('grpcio-tools'))"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if check.stdout.strip() != generate_protos.GRPCIO_TOOLS_VERSION:
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"grpcio-tools=={generate_protos.GRPCIO_TOOLS_VERSION}"],
            check=True,
            timeout=600,
        )
    return str(python)


def test_checked_in_stubs_match_a_fresh_generation(tmp_path):
    out = tmp_path / "gen"
    subprocess.run(
        [generator_python(), str(PACKAGE / "tools" / "generate_protos.py"), "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    checked_in = PACKAGE / "fairway" / "_proto"
    fresh = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert fresh, "the generator wrote files"
    stale = [str(p) for p in fresh if (checked_in / p).read_bytes() != (out / p).read_bytes()]
    assert stale == [], f"stubs out of date, run tools/generate_protos.py: {stale}"
    kept = sorted(
        p.relative_to(checked_in)
        for p in checked_in.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p != checked_in / "__init__.py"
    )
    assert kept == fresh, "no stub left over, none missing"


def test_the_stubs_import_under_the_package_and_not_as_fairway_v1():
    from fairway._proto.fairway.v1 import matching_pb2, visits_pb2

    assert matching_pb2.TaskSpec.__module__ == "fairway._proto.fairway.v1.matching_pb2"
    assert visits_pb2.VisitOutcome.DESCRIPTOR.full_name == "fairway.v1.VisitOutcome"
