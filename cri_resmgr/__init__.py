"""cri-resmgr: a CRI relay that applies node resource policies."""

__version__ = "0.1.0"
