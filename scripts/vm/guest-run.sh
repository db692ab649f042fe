#!/bin/sh
# Runs in the VM suite's guest (crirm-vm-start, from the image, execs it): the guest tests
# (tests/vm/guest) of this boot's topology with the image's venv, their output, junit XML
# and exit status written to the results share, which the host reads after the power-off
# (tests/harness/vm.py). The host wrote what to run into the share: topology, venv,
# pytest-args.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
res=/run/crirm-results
topology=$(cat "$res/topology")
venv=$(cat "$res/venv")
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
export CRIRM_VM_GUEST=1 CRIRM_VM_TOPOLOGY="$topology"
export PYTHONPATH="$src"
# The checkout is read-only here: its byte code was compiled by the host before the boot
# (tests/harness/vm.py), which saves minutes at TCG speed.
[ -f "$res/env" ] && . "$res/env"
cd "$src" || exit 1
{
  echo "guest: $(uname -r), $(nproc) CPUs, NUMA nodes $(cat /sys/devices/system/node/online)," \
       "cgroup $(stat -fc %T /sys/fs/cgroup), topology $topology"
} >"$res/output.txt"
# pytest-args holds one argument per line.
IFS='
'
# shellcheck disable=SC2046
set -- $(cat "$res/pytest-args" 2>/dev/null)
unset IFS
echo "crirm-vm: running the guest tests of $topology" >/dev/console
"$venv/bin/python" -m pytest -p no:cacheprovider -q -ra --junitxml="$res/junit.xml" tests/vm/guest "$@" \
  >>"$res/output.txt" 2>&1
echo $? >"$res/rc"
sync
echo "crirm-vm: guest tests done (pytest exit $(cat "$res/rc")); powering off" >/dev/console
# Everything is on the host already (9p writes through). The unit's SuccessAction would
# power off too, but a hung shutdown would then cost the host's whole timeout: off now.
echo 1 >/proc/sys/kernel/sysrq
echo o >/proc/sysrq-trigger
