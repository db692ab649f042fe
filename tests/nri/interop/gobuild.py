"""Builds tests/nri/interop's Go program against Debian's Go packages (GOPATH mode:
containerd/ttrpc, gogo protobuf, grpc status, logrus from /usr/share/gocode), with
Go types that protoc-gen-gogo generates from protos/nri/nri_api.proto. Nothing is
built into the tree: sources, generated code and the binary go to a temporary GOPATH.

`missing()` says why it cannot be built here (the tests skip with that reason);
`build()` returns the binary's path or raises BuildError with the tool's output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
GOCODE = Path("/usr/share/gocode")
TTRPC = GOCODE / "src/github.com/containerd/ttrpc"
# Go's build cache goes with the temporary GOPATH (a cold build takes a few seconds);
# CRI_RESMGR_GOCACHE names one that outlives the run, for working on the Go program.
GOCACHE_ENV = "CRI_RESMGR_GOCACHE"


class BuildError(RuntimeError):
    pass


def missing() -> str | None:
    """Why the program cannot be built here, or None."""
    if shutil.which("go") is None:
        return "no `go` on PATH (Debian: apt-get install golang-go)"
    if not TTRPC.is_dir():
        return f"no containerd/ttrpc Go sources in {TTRPC} (Debian: golang-github-containerd-ttrpc-dev)"
    if shutil.which("protoc-gen-gogo") is None:
        return "no protoc-gen-gogo on PATH (Debian: gogoprotobuf)"
    return None


def _run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    done = subprocess.run(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")


def build(gopath: Path, mux_source: Path | None = None) -> Path:
    """Builds into `gopath` (a fresh directory) and returns the binary. `mux_source`
    replaces mux.go (the one-off check with upstream's multiplexer does that)."""
    src = gopath / "src" / "nriinterop"
    (src / "api").mkdir(parents=True)
    for f in HERE.glob("*.go"):
        shutil.copy(f, src / f.name)
    if mux_source is not None:
        shutil.copy(mux_source, src / "mux.go")
    protos = REPO / "protos" / "nri"
    _run([sys.executable, "-m", "grpc_tools.protoc", f"-I{protos}",
          f"--plugin=protoc-gen-gogo={shutil.which('protoc-gen-gogo')}", f"--gogo_out={src / 'api'}",
          str(protos / "nri_api.proto")])
    gocache = Path(os.environ.get(GOCACHE_ENV) or gopath / "gocache")
    gocache.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")} | {
        "GO111MODULE": "off", "GOPATH": f"{gopath}:{GOCODE}", "GOCACHE": str(gocache),
        "GOFLAGS": "-mod=", "CGO_ENABLED": "0",
    }
    binary = gopath / "bin" / "nri-interop"
    _run(["go", "build", "-o", str(binary), "nriinterop"], env=env, cwd=src)
    return binary
