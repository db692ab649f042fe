"""The hardware model: CPU sets (`cpuset`), the topology (`model`), its sysfs
reader (`discovery`) and topology-aware CPU picking (`cpuallocator`).

Everything here is plain data and computation with no knowledge of CRI,
containers or policies; only `discovery` reads files.
"""

from .discovery import discover
from .model import CoreKey, CPUInfo, NumaNode, Topology, TopologyError

__all__ = ["discover", "CoreKey", "CPUInfo", "NumaNode", "Topology", "TopologyError"]
