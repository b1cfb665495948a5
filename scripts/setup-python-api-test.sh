#!/bin/sh
# A Python with grpcio for the README's API examples, and stubs generated from proto/:
#   sh scripts/setup-python-api-test.sh STUBS_DIR
# Makes a venv (once per requirements file, cached in ~/.cache/gang, or $GANG_PYTHON_CACHE)
# with scripts/python-api-requirements.txt from PyPI, writes gang/v1/gang_pb2{,_grpc}.py
# into STUBS_DIR, and prints the venv's python on the last line of stdout.
# Run by crates/gang-e2e/tests/python_api.rs (so `cargo test --workspace` and .ci/run
# reach it); needs python3 with venv (Debian: python3-venv, in scripts/setup-test-deps.sh)
# and network access to PyPI the first time.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
req="$here/python-api-requirements.txt"
stubs=${1:?usage: setup-python-api-test.sh STUBS_DIR}

# One venv per requirements file: changing the pins makes a new one.
key=$(sha256sum "$req" | cut -c1-16)
cache=${GANG_PYTHON_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gang}
venv="$cache/python-api-$key"
mkdir -p "$cache"

# Two test runs at once must not build the same venv together.
exec 9>"$cache/python-api.lock"
flock 9
if [ ! -x "$venv/bin/python" ]; then
    echo "setup-python-api-test: making $venv" >&2
    rm -rf "$venv.tmp"
    python3 -m venv "$venv.tmp" >&2
    "$venv.tmp/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
    # Built in a scratch directory and moved, so a failed install leaves nothing half-made.
    mv "$venv.tmp" "$venv"
fi
flock -u 9

mkdir -p "$stubs"
"$venv/bin/python" -m grpc_tools.protoc -I "$root/proto" --python_out="$stubs" \
    --grpc_python_out="$stubs" "$root/proto/gang/v1/gang.proto" >&2
echo "$venv/bin/python"
