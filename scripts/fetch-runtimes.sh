#!/usr/bin/env bash
# Fetches the newer containerd releases the NRI and relay tests run against, without
# changing anything on the system: Debian's own packages, downloaded with a private apt
# state (own sources list, lists, cache, no source parts nor preferences from /etc/apt)
# and unpacked with `dpkg -x` into a cache outside the repository, one directory per
# version. Nothing is installed; the tests run the unpacked `containerd`, `ctr` and
# `containerd-shim-runc-v2` with the system's runc (Debian's newer runc wants a newer
# glibc). A version already unpacked is reused without touching the network.
#
#   scripts/fetch-runtimes.sh            # all of RUNTIMES below
#   CRI_RESMGR_RUNTIME_CACHE=DIR ...     # another cache directory
#
# Layout: $CACHE/containerd-<upstream version>/usr/bin/{containerd,ctr,containerd-shim-runc-v2}
# and $CACHE/containerd-<upstream version>/.complete (written last; tests look for it).
set -euo pipefail

CACHE=${CRI_RESMGR_RUNTIME_CACHE:-/var/cache/cri-resmgr-test}
# suite:upstream version. The version is what the tests and docs/nri.md speak of; a
# suite that moved on to another version fails here with a clear line.
RUNTIMES=(trixie:1.7.24 sid:2.1.9)

have() { [ -f "$CACHE/containerd-$1/.complete" ] && [ -x "$CACHE/containerd-$1/usr/bin/containerd" ]; }

missing=()
for r in "${RUNTIMES[@]}"; do
  have "${r#*:}" || missing+=("$r")
done
((${#missing[@]})) || exit 0

mkdir -p "$CACHE"
# One fetch at a time (several worktrees' `make deps` at once): the others wait, then find
# the versions unpacked. Without it two would unpack into the same .partial directory, and
# one would remove the directory the other's tests already run from.
exec 9>"$CACHE/.lock"
flock 9
missing=()
for r in "${RUNTIMES[@]}"; do
  have "${r#*:}" || missing+=("$r")
done
((${#missing[@]})) || exit 0

apt_dir=$(mktemp -d "$CACHE/.apt-XXXXXX")
trap 'rm -rf "$apt_dir"' EXIT
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts" "$apt_dir/prefs" "$apt_dir/debs"
# _apt (apt's download user) must be able to write where the .deb lands.
chmod 755 "$apt_dir"
chown _apt "$apt_dir/debs" "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" 2>/dev/null || true

for r in "${missing[@]}"; do
  suite=${r%%:*} version=${r#*:}
  echo "fetch-runtimes: containerd $version from Debian $suite into $CACHE/containerd-$version"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" \
    >"$apt_dir/sources.list"
  opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o "Dir::Etc::SourceParts=$apt_dir/parts"
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
        -o "Dir::Etc::Preferences=$apt_dir/prefs/none" -o "Dir::Etc::PreferencesParts=$apt_dir/prefs"
        -o "Acquire::Languages=none" -o "APT::Get::List-Cleanup=false" -q)
  rm -f "$apt_dir"/lists/*_Packages* "$apt_dir"/lists/*Release*
  apt-get "${opts[@]}" update >/dev/null
  deb_version=$(apt-cache "${opts[@]}" madison containerd | awk -v s="$suite" '$0 ~ s {print $3}' |
                grep -m1 "^$version[~+-]" || true)
  if [ -z "$deb_version" ]; then
    echo "fetch-runtimes: Debian $suite has no containerd $version any more:" \
         "$(apt-cache "${opts[@]}" madison containerd | awk '{print $3}' | tr '\n' ' ')" >&2
    exit 1
  fi
  (cd "$apt_dir/debs" && apt-get "${opts[@]}" download "containerd=$deb_version" >/dev/null 2>&1) || {
    echo "fetch-runtimes: apt-get download containerd=$deb_version failed" >&2; exit 1; }
  target="$CACHE/containerd-$version"
  rm -rf "$target.partial" && mkdir -p "$target.partial"
  dpkg -x "$apt_dir"/debs/containerd_*.deb "$target.partial"
  rm -f "$apt_dir"/debs/*.deb
  echo "$deb_version" >"$target.partial/.complete"
  rm -rf "$target" && mv "$target.partial" "$target"
done
