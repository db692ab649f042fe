"""tests/vm: the VM suite (docs/vm.md). `make test-vm` runs test_vm.py on the host, which
boots the guest once per topology; tests/vm/guest/ runs only inside the guest (it changes
cgroups, disks and schedulers as root), so the host never collects it."""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("CRIRM_VM_GUEST") == "1" else ["guest"]
