#!/usr/bin/env bash
# The Python client's tests (clients/python), against a real `fairway serve`.
#
# Run from the repository root after `cargo build` (the server binary is
# $FAIRWAY_BIN, default target/debug/fairway). It sets everything up itself,
# with network to PyPI, in venvs under .deploy/python/:
#   low/    the lowest Python found (3.9) with the LOWEST grpcio and protobuf
#           that clients/python/pyproject.toml declares, pinned exactly;
#   new/    python3 with the newest grpcio and protobuf;
#   protoc/ grpcio-tools at the version the stubs are generated with (for
#           the stub-freshness test; kept apart from the versions under test).
# The full suite runs in both. The last line sums the counts:
#   python-tests: N passed, M failed, K skipped
# Exit status: non-zero on any failure, a missing binary or an unreachable PyPI.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
PKG=$ROOT/clients/python
VENVS=$ROOT/.deploy/python
export FAIRWAY_BIN=${FAIRWAY_BIN:-$ROOT/target/debug/fairway}

if [[ ! -x $FAIRWAY_BIN ]]; then
    echo "test-python: the server binary $FAIRWAY_BIN is missing: build it with \`cargo build\` (or set FAIRWAY_BIN)" >&2
    echo "python-tests: 0 passed, 1 failed, 0 skipped"
    exit 1
fi

PY_NEW=$(command -v python3 || true)
if [[ -z $PY_NEW ]]; then
    echo "test-python: no python3 on PATH" >&2
    echo "python-tests: 0 passed, 1 failed, 0 skipped"
    exit 1
fi
PY_LOW=""
for candidate in /root/.pyenv/versions/3.9.*/bin/python3.9 "$(command -v python3.9 || true)"; do
    if [[ -n $candidate && -x $candidate ]]; then PY_LOW=$candidate; break; fi
done
if [[ -z $PY_LOW ]]; then
    echo "test-python: NOTE: no Python 3.9 found; the lowest-versions run uses $PY_NEW ($($PY_NEW --version)) instead"
    PY_LOW=$PY_NEW
fi

# The lowest declared versions, read from pyproject.toml (`name>=X`).
lowest() {
    sed -n "s/^ *\"$1>=\([0-9.]*\).*/\1/p" "$PKG/pyproject.toml" | head -n 1
}
GRPCIO_LOW=$(lowest grpcio)
PROTOBUF_LOW=$(lowest protobuf)
TOOLS_VERSION=$(sed -n 's/^GRPCIO_TOOLS_VERSION = "\(.*\)"/\1/p' "$PKG/tools/generate_protos.py")
if [[ -z $GRPCIO_LOW || -z $PROTOBUF_LOW || -z $TOOLS_VERSION ]]; then
    echo "test-python: could not read the declared lower bounds (grpcio '$GRPCIO_LOW', protobuf '$PROTOBUF_LOW') or the grpcio-tools version ('$TOOLS_VERSION')" >&2
    exit 1
fi

make_venv() { # DIR PYTHON
    if [[ ! -x $1/bin/python ]]; then
        rm -rf "$1"
        "$2" -m venv "$1" || { echo "test-python: cannot create a venv with $2" >&2; exit 1; }
    fi
}

pip_install() { # VENV ARGS...
    local venv=$1
    shift
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >"$venv/pip.log" 2>&1; then
        cat "$venv/pip.log" >&2
        echo "test-python: pip install $* failed in $venv: PyPI must be reachable to set up the Python tests" >&2
        echo "python-tests: 0 passed, 1 failed, 0 skipped"
        exit 1
    fi
}

mkdir -p "$VENVS"
make_venv "$VENVS/protoc" "$PY_NEW"
pip_install "$VENVS/protoc" "grpcio-tools==$TOOLS_VERSION"
export FAIRWAY_PROTOC_PYTHON=$VENVS/protoc/bin/python

make_venv "$VENVS/low" "$PY_LOW"
pip_install "$VENVS/low" "$PKG[test]" "grpcio==$GRPCIO_LOW" "protobuf==$PROTOBUF_LOW"
# A reinstall of the same version would keep an old build: force the package itself.
pip_install "$VENVS/low" --force-reinstall --no-deps "$PKG"

make_venv "$VENVS/new" "$PY_NEW"
pip_install "$VENVS/new" --upgrade --upgrade-strategy eager "$PKG[test]" grpcio protobuf
pip_install "$VENVS/new" --force-reinstall --no-deps "$PKG"

PASSED=0 FAILED=0 SKIPPED=0 STATUS=0
run_suite() { # NAME VENV
    local name=$1 venv=$2 out
    out=$(mktemp)
    echo "== python tests ($name): $("$venv/bin/python" -c 'import sys, grpc, google.protobuf as p; print(f"Python {sys.version.split()[0]}, grpcio {grpc.__version__}, protobuf {p.__version__}")')"
    # Run from the repository root with the venv's pytest, so that the
    # installed package is tested, not the source tree.
    "$venv/bin/pytest" "$PKG/tests" -q -p no:cacheprovider 2>&1 | tee "$out"
    local rc=${PIPESTATUS[0]}
    local summary
    summary=$(grep -E '^=+ .*(passed|failed|error|skipped|no tests ran).* =+$' "$out" | tail -n 1)
    [[ -z $summary ]] && summary=$(grep -E '[0-9]+ (passed|failed)' "$out" | tail -n 1)
    count() { echo "$summary" | grep -oE "[0-9]+ $1" | grep -oE '[0-9]+' | head -n 1; }
    local p f e s
    p=$(count passed) f=$(count failed) e=$(count 'errors?') s=$(count skipped)
    PASSED=$((PASSED + ${p:-0}))
    FAILED=$((FAILED + ${f:-0} + ${e:-0}))
    SKIPPED=$((SKIPPED + ${s:-0}))
    if [[ $rc -ne 0 ]]; then
        echo "test-python: pytest ($name) exited $rc" >&2
        STATUS=1
        # A run that ended without counting its failures still counts one.
        if [[ -z ${f:-} && -z ${e:-} ]]; then FAILED=$((FAILED + 1)); fi
    fi
    rm -f "$out"
}

run_suite "lowest: Python ${PY_LOW##*/}, grpcio==$GRPCIO_LOW, protobuf==$PROTOBUF_LOW" "$VENVS/low"
run_suite "newest: $($PY_NEW --version)" "$VENVS/new"

echo "python-tests: $PASSED passed, $FAILED failed, $SKIPPED skipped"
exit $STATUS
