"""Builds the test images as one OCI image-layout tarball, without a registry.

Both images share a single layer made of a static busybox binary plus its
applet links; they differ only in their config (entrypoint).  The tarball is
built deterministically (fixed mtimes, sorted entries), so the same busybox
binary always yields the same digests, and it is cached by content key so
repeated test sessions do not rebuild it.

`ctr images import` names each image from the `io.containerd.image.name`
annotation of its index entry.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import platform
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

BUSYBOX_IMAGE = "localhost/busybox:latest"
PAUSE_IMAGE = "localhost/pause:latest"
DEFAULT_BUSYBOX = Path("/bin/busybox")

# Bumped whenever the tarball layout changes, so stale cached tarballs are
# never reused.
_BUILDER_VERSION = "1"

# Exits 0 on SIGTERM/SIGINT.  The sleep runs in the background so that the
# shell is inside `wait` (interruptible by the trap) rather than blocked in a
# foreground child; the trap kills that child so nothing is left behind even
# when the pod shares the host PID namespace.
_PAUSE_SCRIPT = 'trap \'kill $! 2>/dev/null; exit 0\' TERM INT; while :; do sleep 3600 & wait $!; done'

_PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
_MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
_MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"


@dataclass(frozen=True)
class ImageSpec:
    """One image: its full reference and process defaults."""

    name: str
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()


DEFAULT_IMAGES: tuple[ImageSpec, ...] = (
    ImageSpec(BUSYBOX_IMAGE, cmd=("sh",)),
    ImageSpec(PAUSE_IMAGE, entrypoint=("/bin/sh", "-c", _PAUSE_SCRIPT)),
)


def default_cache_dir() -> Path:
    """Where built tarballs are kept between sessions."""
    override = os.environ.get("CRI_RESMGR_IMAGE_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cri-resmgr" / "images"


def oci_architecture() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}.get(machine, machine)


def ensure_images_tar(
    cache_dir: Path | None = None,
    busybox: Path = DEFAULT_BUSYBOX,
    images: tuple[ImageSpec, ...] = DEFAULT_IMAGES,
) -> Path:
    """Returns the path of the images tarball, building it only when missing."""
    if not busybox.is_file():
        raise FileNotFoundError(f"busybox binary not found: {busybox} (install busybox-static)")
    cache_dir = cache_dir or default_cache_dir()
    binary = busybox.read_bytes()
    key = hashlib.sha256(
        binary + json.dumps([_BUILDER_VERSION, [vars(i) for i in images]], default=list).encode()
    ).hexdigest()[:16]
    target = cache_dir / f"crirm-images-{key}.tar"
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    data = build_images_tar(binary, _applets(busybox), images)
    # Written under a temporary name and renamed, so concurrent sessions never
    # see a half-written tarball.
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".building-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target


def _applets(busybox: Path) -> list[str]:
    out = subprocess.run([str(busybox), "--list"], check=True, capture_output=True, text=True).stdout
    return sorted(a for a in out.split() if a and "/" not in a and a != "busybox")


def build_images_tar(busybox_binary: bytes, applets: list[str], images: tuple[ImageSpec, ...]) -> bytes:
    """Returns an OCI image-layout tarball holding `images`, all on one layer."""
    layer = _layer_tar(busybox_binary, applets)
    blobs: dict[str, bytes] = {}
    layer_digest = _add_blob(blobs, layer)
    manifests = []
    for spec in images:
        config_digest = _add_blob(blobs, _json(_image_config(spec, layer_digest)))
        manifest = _json(
            {
                "schemaVersion": 2,
                "mediaType": _MEDIA_MANIFEST,
                "config": {"mediaType": _MEDIA_CONFIG, "digest": config_digest, "size": len(blobs[config_digest])},
                # Uncompressed layer: its digest equals the config's diff_id.
                "layers": [{"mediaType": _MEDIA_LAYER, "digest": layer_digest, "size": len(layer)}],
            }
        )
        manifest_digest = _add_blob(blobs, manifest)
        manifests.append(
            {
                "mediaType": _MEDIA_MANIFEST,
                "digest": manifest_digest,
                "size": len(manifest),
                "platform": {"architecture": oci_architecture(), "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": spec.name,
                    "org.opencontainers.image.ref.name": spec.name.rsplit(":", 1)[-1],
                },
            }
        )
    index = _json({"schemaVersion": 2, "mediaType": _MEDIA_INDEX, "manifests": manifests})
    files = {"oci-layout": _json({"imageLayoutVersion": "1.0.0"}), "index.json": index}
    for digest, blob in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = blob
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            tar.addfile(_entry(d, tarfile.DIRTYPE, 0o755))
        for name in sorted(files):
            tar.addfile(_entry(name, tarfile.REGTYPE, 0o644, len(files[name])), io.BytesIO(files[name]))
    return out.getvalue()


def _image_config(spec: ImageSpec, layer_digest: str) -> dict:
    config: dict = {"Env": [_PATH_ENV], "WorkingDir": "/"}
    if spec.entrypoint:
        config["Entrypoint"] = list(spec.entrypoint)
    if spec.cmd:
        config["Cmd"] = list(spec.cmd)
    return {
        "created": "1970-01-01T00:00:00Z",
        "architecture": oci_architecture(),
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "cri_resmgr.testing.images"}],
    }


def _layer_tar(busybox_binary: bytes, applets: list[str]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for d, mode in (
            ("bin", 0o755), ("dev", 0o755), ("etc", 0o755), ("proc", 0o555), ("root", 0o700),
            ("run", 0o755), ("sys", 0o555), ("tmp", 0o1777), ("usr", 0o755), ("usr/bin", 0o755),
            ("var", 0o755), ("var/tmp", 0o1777),
        ):
            tar.addfile(_entry(d, tarfile.DIRTYPE, mode))
        tar.addfile(_entry("bin/busybox", tarfile.REGTYPE, 0o755, len(busybox_binary)), io.BytesIO(busybox_binary))
        for applet in applets:
            link = _entry(f"bin/{applet}", tarfile.SYMTYPE, 0o777)
            link.linkname = "busybox"
            tar.addfile(link)
        for name, text in (
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n"),
        ):
            data = text.encode()
            tar.addfile(_entry(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return out.getvalue()


def _entry(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def _add_blob(blobs: dict[str, bytes], data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return digest


def _json(obj: object) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build (or find cached) the test images tarball; print its path.")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--busybox", type=Path, default=DEFAULT_BUSYBOX)
    args = parser.parse_args(argv)
    print(ensure_images_tar(args.cache_dir, args.busybox))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
