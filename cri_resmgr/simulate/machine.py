"""The machine to simulate on: a sysfs tree (a directory or a tarball of one), the JSON
of `cri-resmgr topology -o json`, or a generated shape (shape.py)."""

from __future__ import annotations

import os
import tarfile
import tempfile

from cri_resmgr.bounded import InputError, load_json
from cri_resmgr.simulate.calls import WorkloadError
from cri_resmgr.simulate.inputs import read_text
from cri_resmgr.simulate.shape import topology_of
from cri_resmgr.topology import Topology, TopologyError, discover
from cri_resmgr.topology.load import from_document

__all__ = ["from_host_root", "from_json_file", "from_shape"]

TARBALL_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2")


def from_host_root(path: str) -> Topology:
    """A host root holding sys/devices/system/{cpu,node}, or a tarball of one
    (`tar czf node.tgz sys/devices/system` run in / on the node, or of a directory
    holding such a tree)."""
    if os.path.isdir(path):
        return discover(path)
    if not os.path.exists(path):
        raise TopologyError(f"-host-root {path}: no such directory or tarball")
    if not path.endswith(TARBALL_SUFFIXES):
        raise TopologyError(f"-host-root {path}: not a directory, nor a tarball ({', '.join(TARBALL_SUFFIXES)})")
    with tempfile.TemporaryDirectory(prefix="cri-resmgr-sim-") as root:
        try:
            with tarfile.open(path) as tar:
                # The 'data' filter refuses absolute paths, '..' and device files; sysfs symlinks
                # (cpuN/nodeM) stay, as long as they point inside the tree.
                tar.extractall(root, filter="data")
        except (tarfile.TarError, OSError, EOFError) as e:
            raise TopologyError(f"-host-root {path}: cannot unpack: {e}") from None
        inside = _host_root_in(root, path)
        try:
            return discover(inside)
        except TopologyError as e:
            raise TopologyError(f"-host-root {path} (unpacked): {e}") from None


def _host_root_in(root: str, path: str) -> str:
    """Where the host root is in an unpacked tarball: its top, or the one directory it holds
    (`tar czf node.tgz node/` of a copied tree; through single directories, a few deep).
    Several host roots inside: an error naming them."""
    here = root
    for _ in range(4):
        if os.path.isdir(os.path.join(here, "sys", "devices", "system", "cpu")):
            return here
        entries = [e for e in sorted(os.listdir(here)) if not e.startswith(".")]
        dirs = [e for e in entries
                if os.path.isdir(os.path.join(here, e)) and not os.path.islink(os.path.join(here, e))]
        if len(dirs) != 1 or len(entries) != 1:
            break
        here = os.path.join(here, dirs[0])
    found = []
    for top, subdirs, _ in os.walk(root):
        rel = os.path.relpath(top, root)
        if rel.count(os.sep) > 4:
            subdirs[:] = []
            continue
        if os.path.isdir(os.path.join(top, "sys", "devices", "system", "cpu")):
            found.append(rel)
            subdirs[:] = []
    if len(found) > 1:
        shown = ", ".join(sorted(found)[:6]) + (" ..." if len(found) > 6 else "")
        raise TopologyError(f"-host-root {path}: holds {len(found)} host roots ({shown}); unpack it and give "
                            "one of them")
    if found:
        return os.path.join(root, found[0])
    return root  # discover() says what is missing


def from_json_file(path: str) -> Topology:
    """The machine `cri-resmgr topology -o json` printed, read at a bounded cost (its
    size, UTF-8, nesting: inputs.py, bounded.py)."""
    try:
        doc = load_json(read_text(path, "topology JSON"), path)
    except (WorkloadError, InputError) as e:
        raise TopologyError(str(e)) from None
    try:
        return from_document(doc)
    except TopologyError as e:
        raise TopologyError(f"{path}: {e}") from None


def from_shape(text: str) -> Topology:
    return topology_of(text)
