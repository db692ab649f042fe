#!/usr/bin/env bash
# Builds the VM suite's guest (docs/vm.md): Debian's kernel, a busybox initramfs and an
# mmdebstrap'd Debian 12 root filesystem (Debian's packages only, plus a venv of the relay's
# PyPI dependencies built with Debian's /usr/bin/python3 and containerd 2.1.9 unpacked by
# scripts/fetch-runtimes.sh), in a cache outside the repository, keyed by a hash of what goes
# into it: a second run with the same inputs builds nothing. Nothing is installed on the
# host; the tests' own code is not in the image (the guest reads the checkout over 9p).
#
#   scripts/vm/build-image.sh          build if needed; print the image directory last
#   scripts/vm/build-image.sh --dir    only print where the image for these inputs lives
#                                      (it is ready when DIR/.complete exists)
#
# Layout of DIR: vmlinux (the kernel, uncompressed: TCG skips the decompression), initrd.img,
# rootfs.ext4 (booted with qemu -snapshot: never written), .complete (written last).
# Needs root (mmdebstrap, chroot), mmdebstrap, e2fsprogs, busybox-static, xz-utils and the
# network to Debian's mirror and PyPI (scripts/install-deps.sh vm installs the packages).
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=${CRI_RESMGR_VM_CACHE:-/var/cache/cri-resmgr-test/vm}
RUNTIME_CACHE=${CRI_RESMGR_RUNTIME_CACHE:-/var/cache/cri-resmgr-test}
CONTAINERD_2=2.1.9  # tests/harness/runtimes.py CONTAINERD_2
SUITE=bookworm
MIRROR=${CRI_RESMGR_VM_MIRROR:-http://deb.debian.org/debian}
# The guest's Debian packages: systemd and dbus (the systemd cgroup driver talks to it),
# containerd 1.6 and runc 1.1.5 (which serves 2.1.9 too), busybox-static (the test images
# and the initramfs), python3 (the venv's interpreter), the tools the tests run.
PACKAGES=(linux-image-amd64 systemd systemd-sysv dbus udev kmod containerd runc busybox-static python3
          util-linux procps iproute2 coreutils)
# The initramfs loads these and what they depend on: the root disk is virtio-blk with ext4.
INITRD_MODULES=(virtio_pci virtio_blk crc32c_generic ext4)

# The relay's run-time requirements (setup.cfg install_requires), uvloop and pytest: what the
# guest runs. Read from setup.cfg so that the guest never runs other versions than a node.
requirements() {
  /usr/bin/python3 - <<'PY'
import configparser
cfg = configparser.ConfigParser()
cfg.read("setup.cfg")
lines = cfg["options"]["install_requires"].splitlines() + cfg["options.extras_require"]["uvloop"].splitlines()
reqs = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
print("\n".join(sorted(set(reqs + ["pytest>=7"]))))
PY
}

key_inputs() {
  cat scripts/vm/build-image.sh scripts/vm/guest/*
  requirements
  cat "$RUNTIME_CACHE/containerd-$CONTAINERD_2/.complete" 2>/dev/null || echo "no containerd $CONTAINERD_2"
}
key=$(key_inputs | sha256sum | cut -c1-16)
out="$CACHE/$key"
if [ "${1:-}" = --dir ]; then
  echo "$out"
  exit 0
fi
[ -f "$out/.complete" ] && { echo "$out"; exit 0; }

die() { echo "build-image: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap --mode=root, chroot)"
for tool in mmdebstrap mkfs.ext4 busybox xz; do
  command -v "$tool" >/dev/null || die "$tool is missing (scripts/install-deps.sh vm installs it)"
done
[ -x /usr/bin/python3 ] || die "Debian's /usr/bin/python3 is missing (the guest's venv is made with it)"
ctd2="$RUNTIME_CACHE/containerd-$CONTAINERD_2"
[ -f "$ctd2/.complete" ] || bash scripts/fetch-runtimes.sh >&2
[ -f "$ctd2/.complete" ] || die "containerd $CONTAINERD_2 is not unpacked under $RUNTIME_CACHE"

mkdir -p "$CACHE"
# One build at a time (several worktrees); the others wait and then find it built.
exec 9>"$CACHE/.lock"
flock 9
[ -f "$out/.complete" ] && { echo "$out"; exit 0; }
start=$SECONDS
rm -rf "$out" && mkdir -p "$out"
work="$out/.build"
mkdir -p "$work"

# The venv, at the path it has in the guest too (venvs are not relocatable): Debian's
# python3 is the same 3.11 in the guest, so its compiled wheels run there unchanged.
venv="$out/venv"
echo "build-image: venv ($(requirements | tr '\n' ' '))" >&2
/usr/bin/python3 -m venv "$venv"
requirements >"$work/requirements.txt"
"$venv/bin/pip" install -q -r "$work/requirements.txt" >&2

echo "build-image: Debian $SUITE root filesystem (mmdebstrap)" >&2
guest="$PWD/scripts/vm/guest"
root="$work/root"
# Docs, man pages and translations are never read in the guest: a smaller image to write.
# Debian's initramfs is never booted (ours is made below): update-initramfs is diverted to
# true, which saves two runs of mkinitramfs.
mmdebstrap --variant=apt --mode=root --quiet \
  --include="$(IFS=,; echo "${PACKAGES[*]}")" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --essential-hook='chroot "$1" dpkg-divert --quiet --local --rename --add /usr/sbin/update-initramfs' \
  --essential-hook='ln -s /bin/true "$1/usr/sbin/update-initramfs"' \
  --customize-hook="install -D -m 0755 $guest/crirm-vm-start \"\$1/usr/local/sbin/crirm-vm-start\"" \
  --customize-hook="install -D -m 0644 $guest/crirm-vm.service \"\$1/etc/systemd/system/crirm-vm.service\"" \
  --customize-hook="mkdir -p \"\$1$venv\" \"\$1$ctd2\" && cp -a $venv/. \"\$1$venv/\" && cp -a $ctd2/. \"\$1$ctd2/\"" \
  --customize-hook='chroot "$1" systemctl enable crirm-vm.service' \
  --customize-hook='chroot "$1" systemctl mask containerd.service getty@tty1.service serial-getty@ttyS0.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer systemd-networkd-wait-online.service' \
  --customize-hook='echo crirm-vm >"$1/etc/hostname"' \
  --customize-hook='printf "127.0.0.1 localhost\n127.0.1.1 crirm-vm\n::1 localhost\n" >"$1/etc/hosts"' \
  --customize-hook=': >"$1/etc/resolv.conf"' \
  "$SUITE" "$root" "$MIRROR" >&2

kver=$(basename "$(ls -d "$root"/lib/modules/*)")
# The uncompressed kernel: qemu boots the ELF through its PVH entry, and TCG is spared
# decompressing 8 MB of xz at every boot.
vmlinuz="$root/boot/vmlinuz-$kver"
offset=$(/usr/bin/python3 -c 'import sys; print(open(sys.argv[1], "rb").read().find(b"\xfd7zXZ\x00"))' "$vmlinuz")
[ "$offset" -ge 0 ] || die "no xz stream in $vmlinuz"
# xz stops at the end of its stream and complains of the trailing bytes: judged by the ELF.
tail -c +$((offset + 1)) "$vmlinuz" | xz -dc -q >"$work/vmlinux" 2>/dev/null || true
head -c 4 "$work/vmlinux" | grep -q 'ELF' || die "could not extract vmlinux from $vmlinuz"
mv "$work/vmlinux" "$out/vmlinux"
cp "$vmlinuz" "$out/vmlinuz"

echo "build-image: initramfs" >&2
initrd="$work/initrd"
mkdir -p "$initrd/bin"
cp "$root/bin/busybox" "$initrd/bin/busybox"
install -m 0755 "$guest/initrd-init" "$initrd/init"
for m in "${INITRD_MODULES[@]}"; do
  chroot "$root" /sbin/modprobe -S "$kver" --show-depends "$m"
done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' >"$initrd/modules.list"
while read -r ko; do
  install -D -m 0644 "$root$ko" "$initrd$ko"
done <"$initrd/modules.list"
(cd "$initrd" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$out/initrd.img"

echo "build-image: root disk" >&2
rm -rf "$root/boot"/vmlinuz-* "$root/var/cache/apt"/*.bin "$root/var/lib/apt/lists"/*_Packages
# Room for containerd's snapshots and the tests' scratch files; sparse on the host.
mkfs.ext4 -q -F -L crirm-root -d "$root" "$out/rootfs.ext4" 3G
rm -rf "$work"
date -u +%FT%TZ >"$out/.complete"
echo "build-image: built $out in $((SECONDS - start)) s" >&2
# Builds of other inputs not used for a week: another checkout may still boot a newer one.
find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -path "$out" -mtime +7 -exec rm -rf {} +
echo "$out"
