#!/usr/bin/env bash
# Regenerate the CRI schema files and the Python modules compiled from them.
#
#   scripts/gen-protos.sh [OUT_DIR [PROTO_OUT_DIR]]
#       OUT_DIR        where the *_pb2.py / *_pb2_grpc.py go (default cri_resmgr/_proto)
#       PROTO_OUT_DIR  where the derived runtime_v1alpha2.proto goes (default protos)
#
# 1. runtime_v1alpha2.proto is derived from protos/runtime_v1.proto (only the
#    package line differs), so the two API versions cannot drift.
# 2. Every protos/*.proto (with the freshly derived v1alpha2 in place of the
#    committed one) is compiled with grpc_tools.protoc into OUT_DIR. The include
#    mapping -Icri_resmgr/_proto=<src> makes protoc name the files
#    cri_resmgr/_proto/<name>.proto, so generated cross-imports come out as
#    `from cri_resmgr._proto import <name>_pb2` and work from any directory.
#
# Passing temporary directories for both arguments leaves the tree untouched;
# tests/test_protos.py does that to detect stale committed output.
#
# PYTHON selects the interpreter (default .venv/bin/python, else python3). Its
# grpcio-tools version is stamped into the output, so the committed files are
# reproducible only with the grpcio-tools version the project installs.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

out_dir="${1:-cri_resmgr/_proto}"
proto_out_dir="${2:-protos}"
if [[ -n "${PYTHON:-}" ]]; then
    python="$PYTHON"
elif [[ -x .venv/bin/python ]]; then
    python=.venv/bin/python
else
    python=python3
fi

if ! "$python" -c 'import grpc_tools.protoc' 2>/dev/null; then
    echo "gen-protos: $python cannot import grpc_tools (install grpcio-tools, e.g. 'make deps')" >&2
    exit 1
fi

v1=protos/runtime_v1.proto
if ! grep -q '^package runtime\.v1;$' "$v1"; then
    echo "gen-protos: $v1 lacks the line 'package runtime.v1;'" >&2
    exit 1
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
src="$scratch/src"
gen="$scratch/gen"
mkdir -p "$src" "$gen" "$out_dir" "$proto_out_dir"

shopt -s nullglob
for p in protos/*.proto; do
    [[ "$(basename "$p")" == runtime_v1alpha2.proto ]] || cp "$p" "$src/"
done
# NRI's messages and ttRPC's envelope (cri_resmgr/nri/): their own folder for their
# attribution, compiled beside the others (file names carry the nri_ prefix).
for p in protos/nri/*.proto; do
    cp "$p" "$src/"
done
{
    echo "// generated from runtime_v1.proto by scripts/gen-protos.sh; do not edit"
    echo
    sed 's/^package runtime\.v1;$/package runtime.v1alpha2;/' "$v1"
} >"$src/runtime_v1alpha2.proto"

virtual=()
for p in "$src"/*.proto; do
    virtual+=("cri_resmgr/_proto/$(basename "$p")")
done

# Type stubs (*.pyi) for mypy --strict come from mypy-protobuf's plugins, which
# sit beside the interpreter (pip installs them into the same bin directory).
bindir="$(dirname "$("$python" -c 'import sys; print(sys.executable)')")"
for plugin in protoc-gen-mypy protoc-gen-mypy_grpc; do
    if [[ ! -x "$bindir/$plugin" ]]; then
        echo "gen-protos: $bindir/$plugin is missing (install mypy-protobuf, e.g. 'make deps')" >&2
        exit 1
    fi
done

"$python" -m grpc_tools.protoc \
    -Icri_resmgr/_proto="$src" \
    --python_out="$gen" \
    --grpc_python_out="$gen" \
    --plugin=protoc-gen-mypy="$bindir/protoc-gen-mypy" --mypy_out="$gen" \
    --plugin=protoc-gen-mypy_grpc="$bindir/protoc-gen-mypy_grpc" --mypy_grpc_out="$gen" \
    "${virtual[@]}"

cp "$src/runtime_v1alpha2.proto" "$proto_out_dir/runtime_v1alpha2.proto"
# OUT_DIR holds only generated modules (plus __init__.py): drop those whose
# .proto is gone so the directory mirrors protos/.
rm -f "$out_dir"/*_pb2.py "$out_dir"/*_pb2_grpc.py "$out_dir"/*_pb2.pyi "$out_dir"/*_pb2_grpc.pyi
cp "$gen"/cri_resmgr/_proto/*.py "$gen"/cri_resmgr/_proto/*.pyi "$out_dir/"
echo "gen-protos: ${#virtual[@]} proto file(s) compiled into $out_dir"
