"""Hardware topology: the data model (`model`) and its sysfs reader (`discovery`)."""

from .discovery import discover
from .model import CoreKey, CPUInfo, NumaNode, Topology, TopologyError

__all__ = ["discover", "CoreKey", "CPUInfo", "NumaNode", "Topology", "TopologyError"]
