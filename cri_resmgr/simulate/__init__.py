"""`cri-resmgr simulate` and `cri-resmgr replay` (docs/simulate.md): a front end like the relay.

The machine: `machine.py` (a sysfs tree or tarball, the topology JSON through
topology/load.py) and `shape.py` (generated). The workload as CRI calls (`calls.py`):
`dumpread.py` (a jsonl dump), `pods.py` with `podcalls.py` (YAML pods, as kubelet calls
the runtime for them), `churn.py` (generated). `engine.py` runs the calls through the
engine's interceptors with a policy built as the controller builds it, seen through
`recording.py`; `invariants.py` checks what must hold; `report.py` prints it;
`command.py` is the command line. `replay.py` and `replay_command.py` send a recording
to a runtime again.
"""
