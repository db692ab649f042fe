"""Block I/O and RDT classes: which class a container gets (`select.py`, no I/O), the
resctrl schemata a configuration asks for on this hardware (`rdtplan.py`, no I/O), and
the writers of the container's cgroup files (`blockio.py`, `cgroups.py`) and of the
resctrl groups (`rdt.py`), which touch the host only through `hostfs.HostFiles`."""
