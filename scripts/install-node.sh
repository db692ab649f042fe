#!/usr/bin/env bash
# Installs cri-resmgr on a node (Debian 12, Ubuntu, RHEL-like; docs/node-install.md), or
# removes it again:
#   scripts/install-node.sh [install] [--agent] [--webhook] [--nri] [--from WHEEL|SOURCE_DIR]
#   scripts/install-node.sh uninstall
# install: a self-contained virtualenv under $PREFIX (the relay's run-time dependencies and,
# where it installs, uvloop; --agent adds the kubernetes client and links cri-resmgr-agent,
# --webhook links cri-resmgr-webhook, --nri links cri-resmgr-nri, the NRI plugin, with its
# unit and /etc/default/cri-resmgr-nri: docs/nri.md), the commands linked into $BINDIR, the
# systemd unit, and, only where absent, /etc/default/cri-resmgr and
# /etc/cri-resmgr/fallback.yaml: an operator's files are never overwritten. Everything it adds is listed in $PREFIX/installed-files, which uninstall
# follows: it removes what install added and nothing else (a configuration file the
# operator has changed since stays). It enables and starts nothing: kubelet must be pointed
# at the relay first (docs/node-install.md).
#
# ROOT (tests): a directory to install under as if it were /. The venv and the links hold
# ROOT in their paths and work in place there; this is not a staging area for a package.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ROOT=${ROOT:-}
PREFIX=${PREFIX:-/opt/cri-resmgr}
BINDIR=${BINDIR:-/usr/local/bin}
SYSCONFDIR=${SYSCONFDIR:-/etc}
UNITDIR=${UNITDIR:-/etc/systemd/system}
PYTHON=${PYTHON:-python3}
MANIFEST="$PREFIX/installed-files"

die() { echo "install-node: $*" >&2; exit 1; }
say() { echo "install-node: $*"; }
sum() { sha256sum "$1" | cut -d' ' -f1; }

action=install
extras=() commands=(cri-resmgr) units=(cri-resmgr) from=""
while (($#)); do
  case $1 in
    install|uninstall) action=$1 ;;
    --agent) extras+=(agent); commands+=(cri-resmgr-agent) ;;
    --webhook) commands+=(cri-resmgr-webhook) ;;  # standard library only: no extra
    --nri) commands+=(cri-resmgr-nri); units+=(cri-resmgr-nri) ;;  # the relay's dependencies only
    --from) from=${2:?--from needs a wheel or a source directory}; shift ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
  shift
done

# The previous install's manifest: what is ours to replace or remove.
declare -A ours=()
if [ -f "$ROOT$MANIFEST" ]; then
  while read -r kind path rest; do ours[$path]="$kind $rest"; done < "$ROOT$MANIFEST"
fi

uninstall() {
  [ -f "$ROOT$MANIFEST" ] || die "nothing to uninstall: no $ROOT$MANIFEST"
  if [ -z "$ROOT" ] && command -v systemctl >/dev/null && systemctl is-active -q cri-resmgr.service 2>/dev/null; then
    die "cri-resmgr.service is running: point kubelet back at the runtime, then" \
        "'systemctl disable --now cri-resmgr' (docs/node-install.md, rollback)"
  fi
  local lines=() left=() dirs=() i kind path want
  mapfile -t lines < "$ROOT$MANIFEST"
  # Last added first: files before the directories that hold them. What cannot be removed
  # stays in the manifest, which goes last: a failed uninstall can be run again and
  # orphans nothing.
  for ((i = ${#lines[@]} - 1; i >= 0; i--)); do
    read -r kind path want <<< "${lines[i]}"
    case $path in
      /?*) ;;
      *) say "cannot use manifest line '${lines[i]}': not an absolute path"; left=("${lines[i]}" "${left[@]}"); continue ;;
    esac
    case $kind in
      link) [ ! -L "$ROOT$path" ] || rm -f -- "$ROOT$path" || left=("${lines[i]}" "${left[@]}") ;;
      file) rm -f -- "$ROOT$path" || left=("${lines[i]}" "${left[@]}") ;;
      tree)  # a venv of ours, recorded by path: never a guess, never outside $PREFIX
        case $path in
          "$PREFIX"/venv-*[!/]) [[ $path != *..* ]] && rm -rf -- "$ROOT$path" || left=("${lines[i]}" "${left[@]}") ;;
          *) say "not removing $path: not a venv under $PREFIX"; left=("${lines[i]}" "${left[@]}") ;;
        esac ;;
      conf)
        if [ -f "$ROOT$path" ] && [ "$(sum "$ROOT$path")" != "$want" ]; then
          say "kept $path: changed since it was installed"
        else
          rm -f -- "$ROOT$path" || left=("${lines[i]}" "${left[@]}")
        fi ;;
      dir) dirs+=("$path") ;;  # after the manifest, which one of them holds
      *) say "cannot use manifest line '${lines[i]}': unknown kind"; left=("${lines[i]}" "${left[@]}") ;;
    esac
  done
  if ((${#left[@]})); then
    { for path in "${dirs[@]}"; do echo "dir $path"; done | sort -u; printf '%s\n' "${left[@]}"; } > "$ROOT$MANIFEST.tmp"
    mv -f "$ROOT$MANIFEST.tmp" "$ROOT$MANIFEST"
    die "could not remove ${#left[@]} of the installed paths (above); they stay listed in $ROOT$MANIFEST:" \
        "fix the cause and run uninstall again"
  fi
  rm -f -- "$ROOT$MANIFEST"
  for path in "${dirs[@]}"; do rmdir -- "$ROOT$path" 2>/dev/null || true; done  # kept when something else is inside
  if [ -z "$ROOT" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
  say "removed cri-resmgr (the relay's state, /var/lib/cri-resmgr, is left alone)"
}

# --- install ------------------------------------------------------------------------
new_manifest=()
record() { new_manifest+=("$*"); }

make_dir() {  # the missing directories of $1, each recorded as ours
  local dir=$1 missing=()
  while [ ! -d "$ROOT$dir" ]; do missing=("$dir" "${missing[@]}"); dir=$(dirname "$dir"); done
  for dir in "${missing[@]}"; do mkdir -m 0755 "$ROOT$dir"; record dir "$dir"; done
}

keep_dirs() {  # directories an earlier install made stay recorded as ours
  local path
  for path in "${!ours[@]}"; do
    [ "${ours[$path]%% *}" = dir ] && [ -d "$ROOT$path" ] && record dir "$path"
  done
  return 0
}

install_conf() {  # $1 source, $2 target: put in place only when absent (the operator's otherwise)
  local src=$1 dst=$2
  make_dir "$(dirname "$dst")"
  if [ -e "$ROOT$dst" ]; then
    local was=${ours[$dst]:-}
    if [ "${was%% *}" = conf ]; then record "conf $dst ${was#conf }"; fi
    say "kept $dst"
    return
  fi
  install -m 0644 "$src" "$ROOT$dst"
  record conf "$dst" "$(sum "$ROOT$dst")"
}

install_unit() {  # $1: the unit's name; replaced on every install (customize with drop-ins), unless it is not ours
  local name=$1 dst=$UNITDIR/$1.service
  make_dir "$UNITDIR"
  if [ -e "$ROOT$dst" ] && [ -z "${ours[$dst]:-}" ]; then
    say "kept $dst: not installed by this script"
    return
  fi
  sed -e "s#/usr/local/bin/#$BINDIR/#g" -e "s#/opt/cri-resmgr/#$PREFIX/#g" -e "s#/etc/cri-resmgr/#$SYSCONFDIR/cri-resmgr/#g" \
      -e "s#/etc/default/#$SYSCONFDIR/default/#g" "$here/node/$name.service" > "$ROOT$dst.tmp"
  chmod 0644 "$ROOT$dst.tmp"
  mv -f "$ROOT$dst.tmp" "$ROOT$dst"
  record file "$dst"
}

check_link() {  # before anything is built: a command of the same name that is not ours stops the install
  local dst=$BINDIR/$1
  if [ -e "$ROOT$dst" ] || [ -L "$ROOT$dst" ]; then
    [ -n "${ours[$dst]:-}" ] || die "$dst exists and was not installed by this script; remove it or set BINDIR"
  fi
  return 0
}

link_command() {
  local dst=$BINDIR/$1
  ln -sfn "$ROOT$PREFIX/current/bin/$1" "$ROOT$dst"
  record link "$dst"
}

drop_stale_units() {  # units of an earlier install left out this time (no --nri now); their
  local path          # defaults files stay recorded, for uninstall to judge
  for path in "${!ours[@]}"; do
    case ${ours[$path]%% *} in
      file) [ "$(dirname "$path")" = "$UNITDIR" ] || continue
            printf '%s\n' "${new_manifest[@]}" | grep -qxF "file $path" || rm -f "$ROOT$path" ;;
      conf) [ "$(dirname "$path")" = "$SYSCONFDIR/default" ] && [ -e "$ROOT$path" ] || continue
            printf '%s\n' "${new_manifest[@]}" | grep -q "^conf $path " || record "conf $path ${ours[$path]#conf }" ;;
    esac
  done
  return 0
}

drop_stale_links() {  # commands of an earlier install left out this time (no --agent now)
  local path
  for path in "${!ours[@]}"; do
    [ "${ours[$path]%% *}" = link ] && [ "$(dirname "$path")" = "$BINDIR" ] || continue
    printf '%s\n' "${new_manifest[@]}" | grep -qxF "link $path" || rm -f "$ROOT$path"
  done
  return 0
}

check_python() {
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null ||
    die "$PYTHON is not Python 3.11 or newer (RHEL 9: dnf install python3.11, then PYTHON=python3.11)"
  "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null ||
    die "$PYTHON cannot make a virtualenv (Debian/Ubuntu: apt-get install python3-venv)"
}

install_venv() {
  # A new venv beside the old one, then `current` switched to it: a running relay keeps
  # its files until it restarts. Older venvs than the one just replaced are removed.
  local source=${from:-$(cd "$here/.." && pwd)} spec venv previous="" dir
  [ -e "$source" ] || die "--from $source: no such file or directory"
  spec=$source
  ((${#extras[@]})) && spec="$source[$(IFS=,; echo "${extras[*]}")]"
  make_dir "$PREFIX"
  venv=venv-$(date +%Y%m%d%H%M%S)-$$
  say "building $PREFIX/$venv from $source"
  "$PYTHON" -m venv "$ROOT$PREFIX/$venv"
  record tree "$PREFIX/$venv"
  "$ROOT$PREFIX/$venv/bin/pip" install --disable-pip-version-check --no-input -q "$spec"
  # The docs of this checkout, which the units' Documentation= names (inside the venv: they
  # go with it).
  mkdir -p "$ROOT$PREFIX/$venv/share/doc/cri-resmgr"
  cp -R "$here/../README.md" "$here/../docs" "$ROOT$PREFIX/$venv/share/doc/cri-resmgr/"
  # uvloop makes the relay cheaper per call (docs/benchmarks.md) but is optional: a
  # platform with no wheel and no compiler runs on asyncio, and says so.
  "$ROOT$PREFIX/$venv/bin/pip" install --disable-pip-version-check --no-input -q "uvloop>=0.19" ||
    say "uvloop could not be installed: the relay runs on asyncio's event loop"
  [ -L "$ROOT$PREFIX/current" ] && previous=$(readlink "$ROOT$PREFIX/current")
  ln -sfn "$venv" "$ROOT$PREFIX/current.tmp"
  mv -Tf "$ROOT$PREFIX/current.tmp" "$ROOT$PREFIX/current"
  record link "$PREFIX/current"
  for dir in "$ROOT$PREFIX"/venv-*; do
    [ -d "$dir" ] || continue
    case ${dir##*/} in
      "$venv") ;;
      "$previous") record tree "$PREFIX/$previous" ;;  # the running relay's, until next time
      *) [ -n "${ours[$PREFIX/${dir##*/}]:-}" ] && rm -rf "$dir" ;;
    esac
  done
}

install_all() {
  local name
  check_python
  for name in "${commands[@]}"; do check_link "$name"; done
  keep_dirs
  install_venv
  make_dir "$BINDIR"
  for name in "${commands[@]}"; do link_command "$name"; done
  drop_stale_links
  install_conf "$here/node/cri-resmgr.default" "$SYSCONFDIR/default/cri-resmgr"
  install_conf "$here/node/fallback.yaml" "$SYSCONFDIR/cri-resmgr/fallback.yaml"
  for name in "${units[@]}"; do
    [ "$name" = cri-resmgr ] || install_conf "$here/node/$name.default" "$SYSCONFDIR/default/$name"
    install_unit "$name"
  done
  drop_stale_units
  # Directories first in the manifest, parents before children (uninstall works backwards), each once.
  { printf '%s\n' "${new_manifest[@]}" | awk '$1 == "dir"' | sort -u
    printf '%s\n' "${new_manifest[@]}" | awk '$1 != "dir" && !seen[$0]++'; } > "$ROOT$MANIFEST.tmp"
  mv -f "$ROOT$MANIFEST.tmp" "$ROOT$MANIFEST"
  if [ -z "$ROOT" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
  say "installed $("$ROOT$BINDIR/cri-resmgr" --version) (${commands[*]})"
  say "next: point kubelet at the relay and enable it, docs/node-install.md"
  [[ " ${units[*]} " == *" cri-resmgr-nri "* ]] &&
    say "or, instead of the relay: enable NRI in the runtime, then 'systemctl enable --now cri-resmgr-nri' (docs/nri.md)"
  return 0
}

case $action in
  install) install_all ;;
  uninstall) uninstall ;;
esac
