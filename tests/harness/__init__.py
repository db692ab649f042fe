"""Test and demo harnesses: throwaway containerd instances (`containerd`,
`images`, `cgroupfs`), a kubelet-like CRI driver (`kubelet`, `podspec`), the
relay as a process (`relayproc`), a fake Kubernetes API server (`kubeapi`),
generated sysfs trees (`sysfs`), an event loop on a thread (`loop`), and
`make demo` (`demo`).

Kept out of the installed package: nodes never need them. Run from the
repository root (`python -m tests.harness.demo`) or with it on PYTHONPATH,
as scripts/containerd-up.sh does.
"""
